/* tests/test_access: who may talk to the server (server/access): API keys compared whole, the
 * Host rules for each kind of listen address (loopback, one address, every interface, IPv6)
 * and --allowed-hosts, the Origin rules and --cors-origins, and the flags' errors. */
#include <stdio.h>
#include <string.h>

#include "harness.h"
#include "server/access.h"

static void test_key(void) {
  IL_CHECK_INT(il_access_key_check("", "--api-key"), IL_ERR_INVALID_ARG);
  IL_CHECK_CONTAINS(il_error_detail(), "--api-key");
  IL_CHECK_INT(il_access_key_check("a\tb", "--api-key"), IL_ERR_INVALID_ARG);
  IL_CHECK_INT(il_access_key_check(" ab", "--api-key"), IL_ERR_INVALID_ARG);
  IL_CHECK_OK(il_access_key_check("s3cret key", "--api-key"));
  static char big[IL_ACCESS_KEY_MAX + 2];
  memset(big, 'k', sizeof big - 1);
  IL_CHECK_INT(il_access_key_check(big, "--api-key"), IL_ERR_INVALID_ARG);
  big[IL_ACCESS_KEY_MAX] = 0;
  IL_CHECK_OK(il_access_key_check(big, "--api-key"));
  const char *k = "0123456789abcdef0123456789abcdef-long-key";
  const size_t n = strlen(k);
  IL_CHECK(il_access_key_equal(k, n, k, n));
  IL_CHECK(!il_access_key_equal(k, n, k, n - 1));
  IL_CHECK(!il_access_key_equal(k, n - 1, k, n));
  IL_CHECK(!il_access_key_equal(k, n, "", 0));
  IL_CHECK(!il_access_key_equal("", 0, "", 0));
  char other[64];
  memcpy(other, k, n + 1);
  other[n - 1] ^= 1;
  IL_CHECK(!il_access_key_equal(k, n, other, n));
  other[n - 1] ^= 1;
  other[0] ^= 1;
  IL_CHECK(!il_access_key_equal(k, n, other, n));
  IL_CHECK(il_access_key_equal(big, IL_ACCESS_KEY_MAX, big, IL_ACCESS_KEY_MAX));
}

static void hosts(const char *bind, const char *allowed, const char *ok[], const char *bad[]) {
  il_access *a = NULL;
  IL_CHECK_OK(il_access_new(bind, allowed, NULL, &a));
  if (!a) return;
  for (int i = 0; ok[i]; i++)
    if (!il_access_host_ok(a, ok[i])) {
      IL_CHECK(false);
      fprintf(stderr, "  --host %s --allowed-hosts %s: Host %s should be allowed\n", bind, allowed ? allowed : "-", ok[i]);
    }
  for (int i = 0; bad[i]; i++)
    if (il_access_host_ok(a, bad[i])) {
      IL_CHECK(false);
      fprintf(stderr, "  --host %s --allowed-hosts %s: Host %s should be refused\n", bind, allowed ? allowed : "-", bad[i]);
    }
  il_access_free(a);
}

static void test_hosts(void) {
  hosts("127.0.0.1", NULL,
        (const char *[]){"127.0.0.1:8080", "localhost", "LOCALHOST:1", "localhost.", "[::1]:80", NULL, NULL},
        (const char *[]){"evil.example", "10.1.2.3:8080", "127.0.0.2", "[::2]", "localhost.evil", "", ":80",
                         "[::1", "[::1]x", NULL});
  hosts("192.0.2.5", NULL, (const char *[]){"192.0.2.5:8080", "localhost", NULL},
        (const char *[]){"192.0.2.6", "example.com", NULL});
  hosts("0.0.0.0", NULL, (const char *[]){"10.1.2.3:8080", "192.0.2.5", "[2001:db8::1]:80", "localhost", NULL},
        (const char *[]){"evil.example", "10.1.2.3.nip.io", "[2001:db8::zz]", NULL});
  hosts("::", NULL, (const char *[]){"[fe80::1]", "10.0.0.1", NULL}, (const char *[]){"host.example", NULL});
  hosts("::1", NULL, (const char *[]){"[::1]:8080", "localhost", NULL}, (const char *[]){"[::2]", "evil.example", NULL});
  hosts("127.0.0.1", "inferlab, .svc.cluster.local,Chat.Example",
        (const char *[]){"inferlab", "inferlab:80", "a.svc.cluster.local", "svc.cluster.local", "chat.example", NULL},
        (const char *[]){"inferlab.evil", "xsvc.cluster.local", "evil.example", NULL});
  hosts("127.0.0.1", "*", (const char *[]){"anything.example", "10.0.0.1", NULL}, (const char *[]){NULL});
  il_access *a = NULL;
  IL_CHECK_OK(il_access_new("127.0.0.1", NULL, NULL, &a));
  IL_CHECK(il_access_host_ok(a, NULL)); /* HTTP/1.0 without Host */
  IL_CHECK_CONTAINS(il_access_hosts_note(a), "localhost");
  il_access_free(a);
  IL_CHECK_INT(il_access_new("127.0.0.1", "a b", NULL, &a), IL_ERR_INVALID_ARG);
  IL_CHECK_CONTAINS(il_error_detail(), "--allowed-hosts");
}

static void test_origins(void) {
  il_access *a = NULL;
  bool cors = true;
  IL_CHECK_OK(il_access_new("127.0.0.1", NULL, NULL, &a));
  IL_CHECK(il_access_origin_ok(a, NULL, "127.0.0.1:8080", &cors) && !cors);
  IL_CHECK(il_access_origin_ok(a, "http://127.0.0.1:8080", "127.0.0.1:8080", &cors) && !cors); /* the chat page */
  IL_CHECK(il_access_origin_ok(a, "HTTP://LocalHost:8080", "localhost:8080", &cors) && !cors);
  IL_CHECK(!il_access_origin_ok(a, "http://evil.example", "127.0.0.1:8080", &cors));
  IL_CHECK(!il_access_origin_ok(a, "http://127.0.0.1:8081", "127.0.0.1:8080", &cors));
  IL_CHECK(!il_access_origin_ok(a, "null", "127.0.0.1:8080", &cors));
  IL_CHECK(!il_access_origin_ok(a, "http://127.0.0.1:8080/x", "127.0.0.1:8080", &cors));
  IL_CHECK(!il_access_origin_ok(a, "http://127.0.0.1:8080", NULL, &cors));
  il_access_free(a);
  IL_CHECK_OK(il_access_new("127.0.0.1", NULL, "https://App.example/, http://b.example:3000", &a));
  IL_CHECK(il_access_origin_ok(a, "https://app.example", "127.0.0.1:8080", &cors) && cors);
  IL_CHECK(il_access_origin_ok(a, "http://b.example:3000", "127.0.0.1:8080", &cors) && cors);
  IL_CHECK(!il_access_origin_ok(a, "http://app.example", "127.0.0.1:8080", &cors)); /* another scheme */
  IL_CHECK(!il_access_origin_ok(a, "http://b.example", "127.0.0.1:8080", &cors));
  il_access_free(a);
  IL_CHECK_OK(il_access_new("127.0.0.1", NULL, "*", &a));
  IL_CHECK(il_access_origin_ok(a, "http://any.example", "127.0.0.1:8080", &cors) && cors);
  il_access_free(a);
  IL_CHECK_INT(il_access_new("127.0.0.1", NULL, "app.example", &a), IL_ERR_INVALID_ARG);
  IL_CHECK_CONTAINS(il_error_detail(), "--cors-origins");
}

int main(void) {
  test_key();
  test_hosts();
  test_origins();
  return il_test_finish();
}
