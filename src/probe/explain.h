/* probe/explain: `inferlab doctor --explain "PASTED ERROR"`: from an error message to its
 * failure scenario, the likely causes, the fix and the doctor checks that confirm it.
 *
 * The table holds the failure classes of probe/classes (docs/doctor.md "Failure classes"), each
 * with message fragments copied from real reports
 * ("Driver/library version mismatch", "error 804", "CUDA_ERROR_NO_DEVICE",
 * "could not select device driver"). Matching is case-insensitive substring search; a match
 * scores by the length of the fragments found, so the most specific scenario comes first.
 * Old runtimes used other numbers (pre-CUDA-10.1: 30 unknown, 38 no device, 48 no kernel
 * image), so "error=38" style codes are in the table too.
 * Out-of-memory messages are split by cause from their own numbers (PyTorch's capacity, free
 * and per-process figures; llama.cpp's buffer size; vLLM's startup check; the host OOM
 * killer): this process's model + KV does not fit (110), other processes hold the memory
 * (25), the host OOM killer (112), allocator fragmentation (113), each with its own fix.
 * Xid lines are judged by their number through probe/xid (Xid 31 is an application's MMU fault,
 * 79 a GPU off the bus, 154 the recovery action it names), never as "any Xid". Fragments may
 * require several parts in one line ("a&b"), a class may be vetoed by a fragment, and weak classes
 * (summary lines such as "None of the NVIDIA devices were initialized") step aside for the cause.
 * The corpus in tests/data/doctor_explain_corpus.txt measures it (tests/test_doctor_corpus.c).
 * Not for: looking at the machine (that is il_doctor_run).
 */
#ifndef IL_PROBE_EXPLAIN_H
#define IL_PROBE_EXPLAIN_H

#include <stdio.h>

#include "core/status.h"

typedef struct {
  int scenario;        /* failure class id (probe/classes), IL_CLASS_XID for an Xid */
  char slug[32];       /* class slug, "xid-31" for an Xid: the section of docs/doctor.md */
  char title[160];
  const char *causes;
  const char *fix;
  const char *checks;  /* doctor check ids that confirm it, space separated */
  int score;
  const char *matched; /* the longest fragment that matched */
  char detail[240];    /* what the message's own numbers say (OOM family), "" otherwise */
} il_explain_match;

/* Matches text against the table; writes up to max matches, best first, and returns how many
 * matched (0 = unknown message). Pointers are to static strings. Can't fail. */
int il_explain(const char *text, il_explain_match *out, int max);
/* Prints the matches for text (or a "not recognised" note listing what to run instead).
 * Returns the number of matches. */
int il_explain_print_text(const char *text, FILE *out);
/* JSON: {"schema_version":1,"input":...,"matches":[{scenario,class,doc,title,causes,fix,matched,detail,checks[]}]} */
int il_explain_print_json(const char *text, FILE *out);

#endif
