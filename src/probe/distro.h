/* probe/distro: the sysroot's Linux distribution (/etc/os-release) and the exact command for
 * each repair on it; the host.distro check. See distro.c. Not for: deciding verdicts.
 */
#ifndef IL_PROBE_DISTRO_H
#define IL_PROBE_DISTRO_H

#include <stdbool.h>
#include <stddef.h>

typedef struct il_doctor il_doctor;

typedef enum {
  IL_DISTRO_UNKNOWN = 0,
  IL_DISTRO_UBUNTU,
  IL_DISTRO_DEBIAN,
  IL_DISTRO_FEDORA,
  IL_DISTRO_RHEL,   /* RHEL, Rocky, Alma, CentOS: NVIDIA's dnf repository */
  IL_DISTRO_SUSE,
  IL_DISTRO_ARCH,
} il_distro_family;

/* The distribution of the sysroot, from /etc/os-release. */
typedef struct {
  char id[32], id_like[64], version_id[32], pretty[128];
  il_distro_family family;
} il_distro;

/* Repairs whose command differs per distribution. */
typedef enum {
  IL_CMD_INSTALL_DRIVER,
  IL_CMD_REBUILD_MODULE,     /* arg: kernel release */
  IL_CMD_ENROLL_KEY,         /* Secure Boot: enroll the module signing key */
  IL_CMD_INITRAMFS,
  IL_CMD_HOLD,               /* keep driver packages from upgrading under a running module */
  IL_CMD_REINSTALL_USERSPACE,/* arg: driver version */
  IL_CMD_FABRICMANAGER,      /* arg: driver version */
  IL_CMD_INSTALL_TOOLKIT,
  IL_CMD_INSTALL_PKG,        /* arg: package name ("gcc-12") */
  IL_CMD_KERNEL_HEADERS,     /* arg: kernel release */
  IL_CMD_GSP_FIRMWARE,       /* arg: driver version whose GSP firmware is missing */
} il_distro_cmd;

/* Fills dr->distro. */
void il__distro_facts(il_doctor *dr);
/* "Ubuntu", "Fedora", ... (static strings). */
const char *il_distro_family_name(il_distro_family f);
/* Writes the command for `what` on this distribution into buf (n bytes) and returns buf. */
const char *il__distro_cmd(const il_doctor *dr, il_distro_cmd what, const char *arg, char *buf, size_t n);
void il__distro_check(il_doctor *dr);
/* Version of an installed package in the text of /var/lib/dpkg/status ("1.7.0-1" -> "1.7.0": the
 * leading digits and dots), "" when not installed. With prefix,
 * the first installed package whose name starts with pkg ("nvidia-fabricmanager-"). */
void il__dpkg_version(const char *db, const char *pkg, bool prefix, char *buf, size_t n);

#endif
