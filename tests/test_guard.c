/* tests/test_guard: the connection guard (server/guard) on socket pairs: headers and bodies
 * cut by total time, busy connections left alone, the oldest idle one evicted at the limit, the
 * counters and the active count. */
#include <poll.h>
#include <stdio.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/timer.h"
#include "harness.h"
#include "server/guard.h"

/* The peer of a guarded socket sees EOF within `seconds` (checks that it stays open). */
static bool eof_within(int peer, double seconds) {
  const double end = il_time_now() + seconds;
  while (il_time_now() < end) {
    struct pollfd p = {.fd = peer, .events = POLLIN};
    if (poll(&p, 1, 50) > 0) {
      char c;
      if (recv(peer, &c, 1, MSG_DONTWAIT) == 0) return true;
    }
  }
  return false;
}

/* The peer of a guarded socket sees EOF, however long a loaded machine takes (a guard that
 * never cuts it is ended by the test's CTest timeout). */
static bool eof_eventually(int peer) {
  for (;;) {
    struct pollfd p = {.fd = peer, .events = POLLIN};
    if (poll(&p, 1, -1) > 0) {
      char c;
      ssize_t n = recv(peer, &c, 1, MSG_DONTWAIT);
      if (n == 0) return true;
      if (n < 0) return false;
    }
  }
}

int main(void) {
  il_guard *g = NULL;
  IL_CHECK_INT(il_guard_new(0, 1, 1, 1, &g), IL_ERR_INVALID_ARG);
  IL_CHECK_OK(il_guard_new(4, 2, 0.3, 0.5, &g));
  int a[2], b[2], c[2], d[2];
  IL_CHECK(!socketpair(AF_UNIX, SOCK_STREAM, 0, a) && !socketpair(AF_UNIX, SOCK_STREAM, 0, b) &&
           !socketpair(AF_UNIX, SOCK_STREAM, 0, c) && !socketpair(AF_UNIX, SOCK_STREAM, 0, d));
  int sa = il_guard_add(g, a[0]), sb = il_guard_add(g, b[0]);
  IL_CHECK(sa >= 0 && sb >= 0 && sa != sb);
  il_guard_set_phase(g, sb, IL_GUARD_BUSY);
  IL_CHECK_INT(il_guard_active(g), 1);
  /* a third while two are open: the oldest waiting for headers (a) goes, not the busy one */
  int sc = il_guard_add(g, c[0]);
  IL_CHECK(sc >= 0);
  IL_CHECK(eof_eventually(a[1])); /* at once, in add */
  IL_CHECK_INT(il_guard_dropped(g, IL_GUARD_DROP_EVICTED), 1);
  /* c waits for headers: cut after 0.3 s in all; the busy one stays */
  IL_CHECK(eof_eventually(c[1]));
  IL_CHECK_INT(il_guard_dropped(g, IL_GUARD_DROP_HEADER_TIMEOUT), 1);
  IL_CHECK(!eof_within(b[1], 0.6));
  /* a body gets its own deadline from when the headers were complete */
  il_guard_remove(g, sa);
  il_guard_remove(g, sc);
  int sd = il_guard_add(g, d[0]);
  il_guard_set_phase(g, sd, IL_GUARD_BODY);
  IL_CHECK_INT(il_guard_active(g), 2);
  IL_CHECK(eof_eventually(d[1]));
  IL_CHECK_INT(il_guard_dropped(g, IL_GUARD_DROP_BODY_TIMEOUT), 1);
  il_guard_remove(g, sd);
  il_guard_remove(g, sb);
  IL_CHECK_INT(il_guard_active(g), 0);
  IL_CHECK_INT(il_guard_dropped(g, IL_GUARD_DROP_EVICTED), 1); /* each counted once */
  IL_CHECK_STR(il_guard_drop_name(IL_GUARD_DROP_HEADER_TIMEOUT), "header_timeout");
  il_guard_free(g);
  for (int i = 0; i < 2; i++) close(a[i]), close(b[i]), close(c[i]), close(d[i]);
  return il_test_finish();
}
