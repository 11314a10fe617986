"""tests/python/test_serve_grammar: structured output through `inferlab serve` and `inferlab run`.

30 JSON schemas (nested objects, arrays, enums, numbers with ranges, strings with patterns,
required/optional, anyOf/oneOf, $ref) are sent as response_format json_schema to chat and
completions, streaming and not, two choices each, all at once (continuous batching); every
output must end with finish_reason "stop", parse as JSON and validate against its schema with
the jsonschema package (an implementation independent of inferlab's). Then json_object,
llama-server's "grammar" field, the 400s for unsupported keywords and bad grammars (naming the
keyword and path, or line and column), the 413 when the grammar's states pass
--max-request-memory, the official openai client's response_format call, and `run
--json-schema` / `--grammar` (also on builtin:1b-2l, the 1B model's first two layers, and on the sim device). Every schema bounds its strings and arrays, so its language is
finite and a random model (builtin:tiny) must end within max_tokens.
Skips (exit 77) without jsonschema (pip install -r tests/python/requirements.txt).
"""
import json
import os
import re
import subprocess
import sys
import tempfile
import threading

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serverlib import Checks, Server, need_server, skip  # noqa: E402

try:
    import jsonschema
except ImportError:
    skip("the jsonschema Python package is not installed (pip install -r tests/python/requirements.txt)")

S = lambda n=12: {"type": "string", "maxLength": n}  # noqa: E731
POINT = {"type": "object", "properties": {"x": {"type": "integer", "minimum": -100, "maximum": 100},
                                          "y": {"type": "integer", "minimum": -100, "maximum": 100}},
         "required": ["x", "y"], "additionalProperties": False}
SCHEMAS = [
    {"type": "object", "properties": {"name": S(), "age": {"type": "integer", "minimum": 0, "maximum": 120}},
     "required": ["name", "age"], "additionalProperties": False},
    {"type": "object", "properties": {"a": S(4), "b": {"type": "boolean"}, "c": {"type": "null"}}},
    {"type": "string", "enum": ["red", "green", "blue"]},
    {"type": "object", "properties": {"address": {"type": "object", "properties": {
        "street": S(20), "zip": {"type": "string", "pattern": "^\\d{5}$"}}, "required": ["zip"]}},
     "required": ["address"]},
    {"type": "array", "items": {"type": "integer", "minimum": -10, "maximum": 10}, "minItems": 1, "maxItems": 5},
    {"type": "array", "items": {"enum": ["x", "y", "z"]}, "minItems": 2, "maxItems": 4},
    {"type": "number", "minimum": 0, "maximum": 1},
    {"type": "number", "minimum": -50, "maximum": 50},
    {"type": "object", "properties": {"ok": {"type": "boolean"}, "none": {"type": "null"}},
     "required": ["ok", "none"]},
    {"const": {"version": 2, "tag": "fixed"}},
    {"anyOf": [{"type": "integer", "minimum": 0, "maximum": 9}, S(3)]},
    {"oneOf": [{"type": "object", "properties": {"kind": {"const": "circle"},
                                                 "r": {"type": "integer", "minimum": 1, "maximum": 9}},
                "required": ["kind", "r"], "additionalProperties": False},
               {"type": "object", "properties": {"kind": {"const": "square"},
                                                 "side": {"type": "integer", "minimum": 1, "maximum": 9}},
                "required": ["kind", "side"], "additionalProperties": False}]},
    {"$defs": {"point": POINT}, "type": "object",
     "properties": {"path": {"type": "array", "items": {"$ref": "#/$defs/point"}, "maxItems": 3}},
     "required": ["path"]},
    {"type": "string", "pattern": "^\\(\\d{3}\\) \\d{3}-\\d{4}$"},
    {"type": "string", "pattern": "^[a-z]{3,8}@[a-z]{2,5}\\.(com|org)$"},
    {"type": "string", "minLength": 3, "maxLength": 5},
    {"type": ["integer", "null"], "minimum": -3, "maximum": 3},
    {"type": "object", "properties": {"l1": {"type": "object", "properties": {"l2": {"type": "object", "properties": {
        "l3": {"type": "integer", "minimum": 0, "maximum": 999}}, "required": ["l3"]}}, "required": ["l2"]}},
     "required": ["l1"]},
    {"type": "array", "items": {"type": "object", "properties": {"id": {"type": "integer", "minimum": 1,
                                                                       "maximum": 50}, "label": S(6)},
                                "required": ["id"]}, "maxItems": 2},
    {"type": "integer", "exclusiveMinimum": 10, "exclusiveMaximum": 20},
    {"type": "integer", "minimum": 1000},
    {"type": "integer", "maximum": -5},
    {"type": "object", "properties": {}},
    {"enum": [1, "two", None, True, 4.5]},
    {"type": "array", "items": {"type": "boolean"}, "minItems": 3, "maxItems": 3},
    {"type": "string", "pattern": "^\\d{4}-\\d{2}-\\d{2}$"},
    {"type": "object", "properties": {
        "id": {"type": "integer", "minimum": 0, "maximum": 10 ** 6}, "name": S(8), "email": {
            "type": "string", "pattern": "^[a-z]{1,6}@[a-z]{1,6}\\.com$"}, "score": {"type": "number",
                                                                                   "minimum": 0, "maximum": 100},
        "active": {"type": "boolean"}, "role": {"enum": ["admin", "user", "guest"]},
        "tags": {"type": "array", "items": S(5), "maxItems": 3}, "note": {"type": ["string", "null"], "maxLength": 10}},
     "required": ["id", "name", "role"], "additionalProperties": False},
    {"$defs": {"p": POINT}, "anyOf": [{"$ref": "#/$defs/p"}, {"type": "null"}]},
    {"type": "string", "enum": ["café", "naïve", "日本"]},
    {"type": "object", "properties": {"matrix": {"type": "array", "maxItems": 2, "items": {
        "type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 9}, "minItems": 1, "maxItems": 3}}},
     "required": ["matrix"]},
]
assert len(SCHEMAS) == 30

t = Checks()
for s in SCHEMAS:
    jsonschema.Draft202012Validator.check_schema(s)


def body(i, schema, chat, stream):
    b = {"max_tokens": 1500, "n": 2, "seed": 100 + i, "temperature": 0.9 if i % 3 else 0.0, "stream": stream,
         "response_format": {"type": "json_schema",
                             "json_schema": {"name": "s%d" % i, "schema": schema, "strict": True}}}
    if chat:
        b["messages"] = [{"role": "user", "content": "Answer in JSON."}]
    else:
        b["prompt"] = "JSON:"
    return b


def texts(status, data, chat, stream):
    """[(text, finish_reason)] per choice of a response."""
    if status != 200:
        return None
    if not stream:
        r = json.loads(data)
        return [(c["message"]["content"] if chat else c["text"], c["finish_reason"]) for c in r["choices"]]
    out = {}
    for line in data.decode().splitlines():
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        ev = json.loads(line[6:])
        for c in ev["choices"]:
            txt, fin = out.get(c["index"], ("", None))
            piece = (c.get("delta", {}).get("content") or "") if chat else c["text"]
            out[c["index"]] = (txt + piece, c["finish_reason"] or fin)
    return [out[k] for k in sorted(out)]


def validate(text, schema, what):
    try:
        doc = json.loads(text)
    except ValueError as ex:
        t.check(False, "%s: output parses as JSON (%s): %r" % (what, ex, text))
        return
    try:
        jsonschema.validate(doc, schema)
        t.check(True, what)
    except jsonschema.ValidationError as ex:
        t.check(False, "%s: validates (%s): %r" % (what, ex.message, text))


srv = Server("--parallel", "8", "--ctx", "2048", "--max-queue", "256")
try:
    # all 30 x (chat, completions) at once: they share the batch, each choice its own matcher
    results = {}

    def one(i, chat):
        stream = (i + chat) % 2 == 1
        path = "/v1/chat/completions" if chat else "/v1/completions"
        st, data, _ = srv.request("POST", path, body(i, SCHEMAS[i], chat, stream), timeout=300)
        results[(i, chat)] = (st, data, stream)

    threads = [threading.Thread(target=one, args=(i, c)) for i in range(30) for c in (True, False)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    n_docs = 0
    for (i, chat), (st, data, stream) in sorted(results.items()):
        what = "schema %d %s%s" % (i, "chat" if chat else "completions", " stream" if stream else "")
        t.eq(st, 200, what + ": status")
        got = texts(st, data, chat, stream)
        if got is None:
            print("  body:", data[:300])
            continue
        t.eq(len(got), 2, what + ": two choices")
        for k, (text, fin) in enumerate(got):
            t.eq(fin, "stop", "%s choice %d: finish reason" % (what, k))
            validate(text, SCHEMAS[i], "%s choice %d" % (what, k))
            n_docs += 1
    t.eq(n_docs, 120, "documents checked")

    # json_object: any JSON object (unbounded: small max_tokens may cut it, so check what ended)
    ended = 0
    for seed in range(6):
        st, data, _ = srv.post("/v1/completions", {"prompt": "{", "max_tokens": 300, "seed": seed, "temperature": 1.0,
                                                   "response_format": {"type": "json_object"}})
        t.eq(st, 200, "json_object status")
        c = json.loads(data)["choices"][0]
        if c["finish_reason"] == "stop":
            ended += 1
            t.check(isinstance(json.loads(c["text"]), dict), "json_object: an object %r" % c["text"])
    t.check(ended >= 1, "json_object: some outputs ended (%d of 6)" % ended)

    # llama-server's grammar field, streaming
    g = 'root ::= ("yes" | "no") " " [0-9]{1,2} "."\n'
    for seed in range(4):
        st, data, _ = srv.post("/v1/completions", {"prompt": "Q:", "max_tokens": 50, "seed": seed, "stream": seed % 2 == 1,
                                                   "temperature": 1.0, "grammar": g})
        got = texts(st, data, False, seed % 2 == 1)
        t.check(got and re.fullmatch(r"(yes|no) [0-9]{1,2}\.", got[0][0]) and got[0][1] == "stop",
                "grammar field: %r" % (got,))

    # errors: 400 naming the keyword and path, or the line and column
    def error(b, path="/v1/completions"):
        st, data, _ = srv.post(path, dict({"prompt": "x"}, **b))
        return st, json.loads(data).get("error", {})

    st, e = error({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {
        "type": "object", "properties": {"when": {"type": "string", "format": "date-time"}}}}}})
    t.eq(st, 400, "unsupported keyword: 400")
    t.eq(e.get("param"), "response_format", "unsupported keyword: param")
    t.check("$.properties.when.format" in e.get("message", "") and "'format'" in e.get("message", ""),
            "unsupported keyword named with its path: %r" % e.get("message"))
    st, e = error({"response_format": {"type": "json_schema", "json_schema": {"schema": {"allOf": [{}]}}}})
    t.check(st == 400 and "'allOf'" in e.get("message", ""), "allOf refused: %r" % e.get("message"))
    st, e = error({"grammar": "root ::= \"a\"\nx ::= (\"b\"\n"})
    t.check(st == 400 and e.get("param") == "grammar" and "grammar:2:" in e.get("message", ""),
            "bad grammar: line named: %r" % e.get("message"))
    st, e = error({"grammar": "root ::= \"a\"", "response_format": {"type": "json_object"}})
    t.check(st == 400 and e.get("param") == "grammar", "grammar and response_format together refused")
    st, e = error({"response_format": {"type": "yaml"}})
    t.check(st == 400 and e.get("param") == "response_format", "unknown response_format type refused")
    t.check(srv.alive(), "server alive after the errors")
finally:
    t.eq(srv.stop(), 0, "server exit code")

# the matcher states count against --max-request-memory: 16 choices' states do not fit in 4 MiB
srv = Server("--max-request-memory", "4194304", "--parallel", "2")
try:
    st, data, _ = srv.post("/v1/completions", {"prompt": "x", "n": 16, "max_tokens": 4,
                                               "response_format": {"type": "json_object"}})
    t.eq(st, 413, "grammar states over the request budget: 413")
    t.check(b"--max-request-memory" in data, "413 names --max-request-memory")
    st, data, _ = srv.post("/v1/completions", {"prompt": "x", "n": 1, "max_tokens": 4,
                                               "response_format": {"type": "json_object"}})
    t.eq(st, 200, "one choice fits")
finally:
    t.eq(srv.stop(), 0, "server exit code (budget)")

# --ignore-eos: a grammar that nothing can follow still ends the choice at EOS (stop, not length)
srv = Server("--ignore-eos")
try:
    st, data, _ = srv.post("/v1/completions", {"prompt": "x", "max_tokens": 60, "seed": 1,
                                               "grammar": 'root ::= "done" [0-9]'})
    c = json.loads(data)["choices"][0] if st == 200 else {}
    t.check(re.fullmatch(r"done[0-9]", c.get("text", "")) is not None and c.get("finish_reason") == "stop",
            "--ignore-eos with a finished grammar: %r" % (c,))
finally:
    t.eq(srv.stop(), 0, "server exit code (ignore-eos)")

# the official openai client
try:
    import openai
except ImportError:
    openai = None
    print("SKIP part: the openai package is not installed")
if openai:
    srv = Server("--parallel", "4", "--ctx", "2048")
    try:
        client = openai.OpenAI(base_url=srv.base + "/v1", api_key="unused", max_retries=0, timeout=120)
        schema = SCHEMAS[0]
        for seed in (1, 2):
            r = client.chat.completions.create(
                model="builtin:tiny", messages=[{"role": "user", "content": "A person as JSON"}], max_tokens=1000,
                seed=seed, temperature=0.8,
                response_format={"type": "json_schema", "json_schema": {"name": "person", "schema": schema,
                                                                         "strict": True}})
            t.eq(r.choices[0].finish_reason, "stop", "openai client: finish reason")
            validate(r.choices[0].message.content, schema, "openai client json_schema")
        r = client.completions.create(model="builtin:tiny", prompt="Q:", max_tokens=20, seed=3,
                                      extra_body={"grammar": 'root ::= "ok" [0-9]'})
        t.check(re.fullmatch(r"ok[0-9]", r.choices[0].text) is not None, "openai client grammar: %r" % r.choices[0].text)
        try:
            client.chat.completions.create(model="builtin:tiny", messages=[{"role": "user", "content": "x"}],
                                           response_format={"type": "json_schema", "json_schema": {
                                               "name": "x", "schema": {"type": "string", "format": "email"}}})
            t.check(False, "openai client: unsupported keyword raises")
        except openai.BadRequestError as ex:
            t.check("format" in str(ex), "openai client: BadRequestError names the keyword")
    finally:
        t.eq(srv.stop(), 0, "server exit code (openai)")

# inferlab run --json-schema / --grammar
cli = need_server()
with tempfile.TemporaryDirectory() as d:
    sp = os.path.join(d, "s.json")
    with open(sp, "w") as f:
        json.dump(SCHEMAS[27], f)
    for seed in (1, 2, 3):
        r = subprocess.run([cli, "run", "--json-schema", sp, "-p", "JSON:", "--no-echo", "-n", "1500", "--ctx", "2048",
                            "--seed", str(seed), "--temp", "0.9"], capture_output=True, text=True, timeout=120)
        t.eq(r.returncode, 0, "run --json-schema exit code")
        t.check("stopped at end of text" in r.stderr, "run --json-schema ended on EOS")
        validate(r.stdout.rstrip("\n"), SCHEMAS[27], "run --json-schema seed %d" % seed)
    # the other builtin model and the sim device: the mask runs on the host's logits either way
    # (builtin:1b-2l's forward passes are ~10x slower under AddressSanitizer: tiny only there)
    runs = [("builtin:tiny", ["--device", "sim:1GiB"], 12)]
    if "ASAN_OPTIONS" not in os.environ:
        runs.append(("builtin:1b-2l", ["--wtype", "q4_0"], 0))
    for model, extra, idx in runs:
        with open(sp, "w") as f:
            json.dump(SCHEMAS[idx], f)
        r = subprocess.run([cli, "run", "-m", model] + extra + ["--json-schema", sp, "-p", "JSON:", "--no-echo",
                                                                 "-n", "400", "--ctx", "1024", "--seed", "5"],
                           capture_output=True, text=True, timeout=300)
        t.eq(r.returncode, 0, "run %s %s exit code" % (model, " ".join(extra)))
        t.check("stopped at end of text" in r.stderr, "run %s %s ended on EOS" % (model, " ".join(extra)))
        validate(r.stdout.rstrip("\n"), SCHEMAS[idx], "run %s %s" % (model, " ".join(extra)))
    gp = os.path.join(d, "g.gbnf")
    with open(gp, "w") as f:
        f.write('root ::= "n=" [1-9] [0-9]?\n')
    r = subprocess.run([cli, "run", "--grammar", gp, "-p", "x", "--no-echo", "-n", "20"], capture_output=True,
                       text=True, timeout=60)
    t.check(r.returncode == 0 and re.fullmatch(r"n=[1-9][0-9]?\n", r.stdout) is not None,
            "run --grammar: %r" % r.stdout)
    with open(sp, "w") as f:
        json.dump({"type": "string", "format": "uri"}, f)
    r = subprocess.run([cli, "run", "--json-schema", sp, "-p", "x"], capture_output=True, text=True, timeout=60)
    t.eq(r.returncode, 69, "run: unsupported keyword exits 69")
    t.check("$.format" in r.stderr, "run: the keyword's path in the error: %r" % r.stderr)
    with open(gp, "w") as f:
        f.write('root ::= "a" |\n  ( "b"\n')
    r = subprocess.run([cli, "run", "--grammar", gp, "-p", "x"], capture_output=True, text=True, timeout=60)
    t.eq(r.returncode, 65, "run: bad grammar exits 65")
    t.check(gp + ":3:" in r.stderr or gp + ":2:" in r.stderr, "run: the grammar's line in the error: %r" % r.stderr)

sys.exit(t.finish())
