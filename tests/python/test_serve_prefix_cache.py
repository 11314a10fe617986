"""tests/python/test_serve_prefix_cache: the prefix cache across requests through the server.

200 completions (token-id prompts: one of 4 system prompts of 64 tokens, then a random suffix of
8-40 tokens; 8 client threads, so arrivals interleave) against `--kv paged` with a pool of 64
blocks of 16 (4 slots x 256 positions), below the 300-odd distinct full blocks the prompts hold,
so the cache must evict:
- the hit rate is above 0, evictions happened, and the indexed blocks never exceed the pool;
- usage.prompt_tokens_details.cached_tokens summed over the responses equals
  inferlab_prefix_cache_hits_total (vllm:prefix_cache_hits), prompt_tokens summed equals
  inferlab_prefix_cache_queries_total, and inferlab_prefix_cache_hit_rate is their ratio;
- cached_tokens is a whole number of blocks, below the prompt; a prompt sent twice in a row
  reuses all its whole blocks the second time;
- 12 of the prompts sent again one at a time (their prefixes from the cache) give the greedy
  text of a server started with --no-prefix-cache (which says the cache is off in /metrics), and
  logprobs within 1e-5. Not bitwise here: through the server, any reuse of a computed prefix,
  the per-slot reuse of a contiguous cache included, moves logprobs in the seventh digit (measured
  the same way before this cache existed); bit-identical logits with and without the cache are
  checked through the engine API in tests/test_prefix_cache.c.
"""
import concurrent.futures
import json
import os
import random
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serverlib import Checks, Server  # noqa: E402

t = Checks()
rng = random.Random(33)
systems = [[rng.randrange(10, 400) for _ in range(64)] for _ in range(4)]
prompts = []
for i in range(200):
    prompts.append(systems[rng.randrange(4)] + [rng.randrange(10, 400) for _ in range(rng.randrange(8, 41))])
# distinct full blocks of 16 over all prompts (a block is its whole prefix)
distinct = {tuple(p[:16 * (k + 1)]) for p in prompts for k in range(len(p) // 16)}
t.check(len(distinct) > 64, "the prompts hold more distinct blocks (%d) than the pool (64)" % len(distinct))

ARGS = ["--kv", "paged", "--kv-block", "16", "--ctx", "256", "--parallel", "4", "--ignore-eos", "--log-format", "off"]
LBL = '{model_name="tiny"}'


def complete(srv, p):
    status, data, _ = srv.post("/v1/completions", {"prompt": p, "max_tokens": 4, "temperature": 0,
                                                   "logprobs": 1})
    return status, json.loads(data)


srv = Server(*ARGS, "--alias", "tiny")
try:
    with concurrent.futures.ThreadPoolExecutor(8) as ex:
        results = list(ex.map(lambda p: complete(srv, p), prompts))
    t.check(all(s == 200 for s, _ in results), "every request answered 200")
    usage = [r["usage"] for _, r in results]
    cached = [u["prompt_tokens_details"]["cached_tokens"] for u in usage]
    t.check(all(c % 16 == 0 and c < u["prompt_tokens"] for c, u in zip(cached, usage)),
            "cached_tokens is whole blocks and below the prompt")
    m = srv.metrics()
    t.eq(m.get("inferlab_prefix_cache_enabled" + LBL), 1, "the cache is on with --kv paged")
    hits, queries = sum(cached), sum(u["prompt_tokens"] for u in usage)
    t.check(hits > 0, "hits: %d of %d prompt tokens" % (hits, queries))
    t.eq(m.get("inferlab_prefix_cache_hits_total" + LBL), hits, "hits counter = sum of usage cached_tokens")
    t.eq(m.get("inferlab_prefix_cache_queries_total" + LBL), queries, "queries counter = sum of prompt_tokens")
    t.check(abs(m.get("inferlab_prefix_cache_hit_rate" + LBL, -1) - hits / queries) < 1e-5, "hit rate = hits / queries")
    ev = m.get("inferlab_prefix_cache_evictions_total" + LBL, 0)
    t.check(ev > 0, "evictions under pressure: %d" % ev)
    held = m.get('inferlab_prefix_cache_blocks{model_name="tiny",state="held"}', -1)
    evictable = m.get('inferlab_prefix_cache_blocks{model_name="tiny",state="evictable"}', -1)
    t.eq(held, 0, "no block held once every request finished")
    t.check(0 < evictable <= 64, "indexed blocks within the pool: %d" % evictable)
    t.check(m.get("inferlab_prefix_cache_bytes" + LBL, 0) > 0, "cache bytes")
    t.eq(m.get('inferlab_kv_cache_blocks{model_name="tiny",state="free"}'), 64, "every block free or evictable")
    print("prefix cache: %d of %d prompt tokens from the cache (hit rate %.3f), %d evictions, %d blocks indexed"
          % (hits, queries, hits / queries, ev, evictable))
    # a prompt sent twice in a row: the second time every whole block below its last token is cached
    complete(srv, prompts[0])
    s, r = complete(srv, prompts[0])
    t.eq(r["usage"]["prompt_tokens_details"]["cached_tokens"], (len(prompts[0]) - 1) // 16 * 16,
         "a repeated prompt reuses all its whole blocks")
    ref = Server(*ARGS, "--alias", "tiny", "--no-prefix-cache")
    try:
        t.eq(ref.metrics().get("inferlab_prefix_cache_enabled" + LBL), 0, "--no-prefix-cache turns it off")
        reused = 0
        for i in range(0, 200, 17):
            s, got = complete(srv, prompts[i])
            s, want = complete(ref, prompts[i])
            reused += got["usage"]["prompt_tokens_details"]["cached_tokens"] > 0
            t.eq(got["choices"][0]["text"], want["choices"][0]["text"], "request %d: text equals the run without the cache" % i)
            lg, lw = got["choices"][0]["logprobs"]["token_logprobs"], want["choices"][0]["logprobs"]["token_logprobs"]
            t.check(len(lg) == len(lw) and max(abs(a - b) for a, b in zip(lg, lw)) <= 1e-5,
                    "request %d: logprobs within 1e-5 of the run without the cache: %s vs %s" % (i, lg, lw))
        t.check(reused >= 6, "most of the 12 took a prefix from the cache: %d" % reused)
        print("greedy text of 12 requests (%d with a cached prefix) equals a server without the cache, logprobs "
              "within 1e-5" % reused)
    finally:
        ref.stop()
finally:
    srv.stop()
t.finish()
