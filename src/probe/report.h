/* probe/report: the doctor report as text for people and as a stable JSON document.
 *
 * Text: one line per check, "OK    id: finding" / "WARN  ..." / "FAIL  ...", a "Devices" block
 * when NVML listed GPUs, then "What to fix" with numbered steps (failures first, then
 * warnings), each naming its check and giving exact commands, and a tally line.
 * JSON (schema_version 1, documented in docs/doctor.md): top-level keys schema_version, tool,
 * inferlab_version, sysroot, exit_code, summary, build, driver, cuda, devices[], pci[],
 * visibility, container, host, checks[] (id, verdict, applicable, scenario, summary, evidence{}, fix),
 * fixes[]. Keys are only ever added, never renamed or removed, within a schema version;
 * unknown numbers are null. Strings are escaped per RFC 8259 (control characters as \u00XX)
 * and the document is always valid UTF-8 (ill-formed or truncated sequences become \ufffd).
 * Not for: deciding verdicts (the check groups under probe/doctor).
 */
#ifndef IL_PROBE_REPORT_H
#define IL_PROBE_REPORT_H

#include <stdbool.h>
#include <stdio.h>

#include "core/status.h"
#include "probe/doctor.h"

#define IL_REPORT_SCHEMA_VERSION 1

/* Writes the human report to out; checks that do not apply here (na) share one "n/a" line
 * unless show_all. IL_ERR_IO when writing fails. il_report_text = il_report_text_ex(.., false). */
il_status il_report_text(const il_doctor *dr, FILE *out);
il_status il_report_text_ex(const il_doctor *dr, FILE *out, bool show_all);
/* Writes the JSON document (one object, newline-terminated). IL_ERR_IO when writing fails. */
il_status il_report_json(const il_doctor *dr, FILE *out);
/* Writes s as a JSON string literal with quotes; NULL writes null. */
void il_report_json_string(FILE *out, const char *s);

#endif
