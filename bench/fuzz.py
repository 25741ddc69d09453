"""Fuzz and fault pass (issue 68): hostile inputs and schemathesis' random mix, stateful
links included, against a served collection while a reader checks every acknowledged id.

Usage: python bench/fuzz.py [--store lite|faiss] [--model DIR] [--examples 25]
       [--scenarios 40] [--results DIR]

``qkv serve`` runs on a fresh store with keys on (an admin key for the fuzzers, a write
key and a read key bound to tenant ``a``, a read key limited to 5 texts/s) and small limits
(1 MiB bodies, 64 documents a request), so the fuzzers reach them. Three things run at once:

* a **writer** upserts batches of new documents into ``fz`` (passages on) and into tenant
  ``a`` of ``mt`` (multi-tenant), and records each batch the server acknowledged (200);
* a **reader** reads acknowledged documents back all the time (``GET .../documents/{id}``)
  and counts every answer that is not 200 with the text written: an acknowledged write
  must be readable at every moment;
* the **fuzzers**, one after the other:

  1. the hostile inputs of issue 68 and 75, replayed by hand, each with the answers it may
     get: the keys file moved away or emptied while the server runs, key bodies with a
     singular ``tenant`` or an empty ``tenants``, ``/embed_all`` on the 5 texts/s key,
     2,000 ``in`` clauses, filters 300 deep, metadata 600 deep, a body nested 100,000 deep,
     trailing commas, no ``Content-Type``, misspelt fields, bodies over the limit, invalid
     UTF-8, ``NaN`` vectors, a read key deleting, a tenant's key reading another tenant,
     the page, docs and schema without a key, ids over the limit;
  2. schemathesis' generated cases, valid and invalid, ``--examples`` per operation, sent
     over HTTP with the admin key (half the path names swapped for the ``play``
     collection so success paths are reached);
  3. schemathesis' stateful runs (``--scenarios``): chains of calls whose links schemathesis
     infers from the schema (a created collection searched, a listed key revoked, ...).

  The fuzzers never aim a destructive call at ``fz``, ``mt`` or the bench's own keys (a
  scenario that would is pointed at ``play`` or a made-up key): what is tested is that
  nothing else can reach them.

The figures: answers by status, 5xx other than 503 and 507 (the target: none), hostile
inputs answered otherwise than documented, schemathesis' conformance failures, tracebacks in
the server's log, documents acknowledged and read back, and reads that failed (the target:
none). ``tests/api/test_fuzz.py`` runs a small pass of it. Prints a markdown section,
recorded (``bench/machine.py``).
"""

from __future__ import annotations

import argparse
import random
import shlex
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
PROTECTED = ("fz", "mt")
PLAY = "play"
BATCH = 8
ALLOWED_5XX = (503, 507)  # documented: a store away, a full disk
# schemathesis' checks as tests/api/test_schemathesis.py runs them (and why, there)
CHECKS = {"negative_data_rejection": {"expected-statuses": [
    "400", "401", "403", "404", "405", "406", "409", "413", "415", "422", "428", "429", "5xx"]},
    "positive_data_acceptance": {"enabled": False}}


@dataclass
class Pass:
    statuses: Counter[int] = field(default_factory=Counter)
    server_errors: list[str] = field(default_factory=list)  # "METHOD path -> status body"
    hostile: list[tuple[str, int, bool, str]] = field(default_factory=list)  # name, status,
    # as documented, the answer's start
    conformance: Counter[str] = field(default_factory=Counter)  # check failures by title
    acked: dict[str, tuple[str, str | None]] = field(default_factory=dict)  # url -> text
    reads: int = 0
    unreadable: list[str] = field(default_factory=list)  # "url -> status body", at once
    writes_refused: Counter[int] = field(default_factory=Counter)
    flaky_scenarios: int = 0  # stateful scenarios hypothesis gave up on (not failures)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def saw(self, method: str, path: str, status: int, body: str) -> None:
        with self.lock:
            self.statuses[status] += 1
            if status >= 500 and status not in ALLOWED_5XX:
                self.server_errors.append(f"{method} {path} -> {status} {body[:200]}")


# keys and the server
def _key(qkv: Path, keys: Path, *args: str) -> str:
    out = subprocess.run([str(qkv), "keys", "create", "--keys-file", str(keys), *args],
                         capture_output=True, text=True, check=True)
    return out.stdout.strip().splitlines()[0]


@dataclass
class Keys:
    admin: str
    write_a: str
    read_a: str
    slow: str  # read, 5 texts/s

    def ids(self) -> set[str]:
        return {s.split("-")[1] for s in (self.admin, self.write_a, self.read_a, self.slow)}


def make_keys(keys_file: Path) -> Keys:
    qkv = Path(sys.executable).with_name("qkv")
    return Keys(_key(qkv, keys_file, "--scope", "admin"),
                _key(qkv, keys_file, "--scope", "write", "--tenant", "a"),
                _key(qkv, keys_file, "--scope", "read", "--tenant", "a"),
                _key(qkv, keys_file, "--scope", "read", "--tps", "5"))


def bearer(secret: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {secret}"}


# the writer and the reader
def _writer(base: str, keys: Keys, p: Pass, stop: threading.Event, seed: int) -> None:
    rnd = random.Random(seed)
    tag = f"{rnd.getrandbits(32):08x}"
    n = 0
    with httpx.Client(base_url=base, timeout=60) as c:
        while not stop.is_set():
            mt = n % 2 == 1
            ids = [f"ack-{tag}-{n + i}" for i in range(BATCH)]
            # every third batch long enough to be cut into passages
            texts = {i: f"acknowledged document {i} about dogs. " * (60 if n % 3 == 0 else 1)
                     for i in ids}
            docs = [{"id": i, "text": t} for i, t in texts.items()]
            url = "/v1/collections/mt/documents" if mt else "/v1/collections/fz/documents"
            headers = ({**bearer(keys.write_a), "X-Tenant": "a"} if mt
                       else bearer(keys.admin))
            try:
                r = c.post(url, json={"documents": docs}, headers=headers)
            except httpx.TransportError:
                time.sleep(0.2)
                continue
            p.saw("POST", url, r.status_code, r.text)
            if r.status_code == 200:
                with p.lock:
                    p.acked.update((f"{url}/{i}", (t, "a" if mt else None))
                                   for i, t in texts.items())
            else:
                p.writes_refused[r.status_code] += 1
            n += BATCH
            time.sleep(0.05)


def _reader(base: str, keys: Keys, p: Pass, stop: threading.Event, seed: int) -> None:
    rnd = random.Random(seed)
    with httpx.Client(base_url=base, timeout=60) as c:
        while not stop.is_set():
            with p.lock:
                urls = list(p.acked)
            if not urls:
                time.sleep(0.1)
                continue
            for url in rnd.sample(urls, min(20, len(urls))):
                text, tenant = p.acked[url]
                check(c, keys, p, url, text, tenant)


def check(c: httpx.Client, keys: Keys, p: Pass, url: str, text: str, tenant: str | None
          ) -> None:
    """Read one acknowledged document back; any answer but 200 with its text is counted."""
    headers = {**bearer(keys.read_a), "X-Tenant": tenant} if tenant else bearer(keys.admin)
    try:
        r = c.get(url, headers=headers)
    except httpx.TransportError as e:
        bad = f"{url} -> {type(e).__name__}"
    else:
        p.saw("GET", url, r.status_code, r.text)
        if r.status_code == 200 and r.json().get("text") == text:
            bad = ""
        else:
            bad = f"{url} -> {r.status_code} {r.text[:160]}"
    with p.lock:
        p.reads += 1
        if bad:
            p.unreadable.append(bad)


# 1. the hostile inputs
def nested(depth: int, leaf: Any) -> Any:
    out = leaf
    for _ in range(depth):
        out = {"a": out}
    return out


Hostile = Callable[[httpx.Client], httpx.Response]


def hostile_cases(keys: Keys, keys_file: Path, dim: int) -> list[tuple[str, Hostile, set[int]]]:
    """(name, the call, the statuses it may answer) for each hostile input."""
    admin, read_a = bearer(keys.admin), bearer(keys.read_a)
    s = "/v1/collections/fz/search"
    eq = {"key": "k", "op": "eq", "value": 1}
    deep: dict[str, Any] = eq
    for _ in range(300):
        deep = {"and": [deep]}

    def keys_file_gone(how: str) -> Hostile:
        def call(c: httpx.Client) -> httpx.Response:
            saved = keys_file.read_bytes()
            try:
                if how == "moved":
                    keys_file.rename(keys_file.with_suffix(".bak"))
                else:
                    keys_file.write_bytes(b"")
                time.sleep(1.5)  # past the keys file's reload interval
                return c.get("/v1/collections/mt/documents/x", headers={"X-Tenant": "b"})
            finally:
                keys_file.with_suffix(".bak").unlink(missing_ok=True)
                keys_file.write_bytes(saved)
                time.sleep(1.5)
        return call

    def raw(path: str, body: bytes, headers: dict[str, str] | None = None) -> Hostile:
        return lambda c: c.post(path, content=body, headers={**admin, **(headers or {})})

    def post(path: str, body: Any, headers: dict[str, str] | None = None) -> Hostile:
        return lambda c: c.post(path, json=body, headers=headers or admin)

    def flood(c: httpx.Client) -> httpx.Response:
        last = None
        for _ in range(20):
            last = c.post("/embed_all", json={"inputs": ["some text"] * 50},
                          headers=bearer(keys.slow))
            if last.status_code == 429:
                break
        assert last is not None
        return last

    deep_body = ("[" * 100_000 + "]" * 100_000).encode()
    big = {"documents": [{"id": "big", "text": "x" * (2 * 2**20)}]}
    return [
        ("keys file moved away: no key", keys_file_gone("moved"), {401}),
        ("keys file emptied: no key", keys_file_gone("emptied"), {401}),
        ("key body with a singular tenant", post("/v1/keys", {"scope": "read", "tenant": "a"}),
         {422}),
        ("key body with no tenants", post("/v1/keys", {"scope": "read", "tenants": []}), {422}),
        ("/embed_all past a 5 texts/s limit", flood, {429}),
        ("2,000 in clauses", post(s, {"query": "x", "filter": {"or": [
            {"key": "k", "op": "in", "value": [i, i + 1]} for i in range(2000)]}}), {422}),
        ("a filter 300 deep", post(s, {"query": "x", "filter": deep}), {422}),
        ("metadata 600 deep", post("/v1/collections/fz/documents", {"documents": [
            {"id": "deep", "text": "t", "metadata": nested(600, 1)}]}), {422}),
        ("a body nested 100,000 deep", raw(s, deep_body, {"Content-Type": "application/json"}),
         {400, 413, 422}),
        ("a trailing comma", raw(s, b'{"query": "x",}', {"Content-Type": "application/json"}),
         {422}),
        ("no Content-Type", raw(s, b'{"query": "x"}', {"Content-Type": "text/plain"}),
         {415, 422}),
        ("a misspelt 'filters'", post(s, {"query": "x", "filters": eq}), {422}),
        ("a misspelt 'topk'", post(s, {"query": "x", "topk": 1}), {422}),
        ("a body over the limit", post("/v1/collections/fz/documents", big), {413}),
        ("invalid UTF-8", raw(s, b'{"query": "\xff\xfe"}', {"Content-Type": "application/json"}),
         {400, 422}),
        ("a NaN vector", raw(s, _nan_vector(dim), {"Content-Type": "application/json"}),
         {422}),
        ("top_k of a billion", post(s, {"query": "x", "top_k": 10**9}), {422}),
        ("a negative top_k", post(s, {"query": "x", "top_k": -1}), {422}),
        ("a read key deleting", lambda c: c.request(
            "DELETE", "/v1/collections/mt/documents", json={"ids": ["x"]},
            headers={**read_a, "X-Tenant": "a"}), {403}),
        ("tenant a's key reading tenant b", lambda c: c.get(
            "/v1/collections/mt/documents/x", headers={**read_a, "X-Tenant": "b"}), {403}),
        ("a wrong key", lambda c: c.get("/v1/collections", headers=bearer("qkv-kx-nope")),
         {401}),
        # open by design (docs/how-to/security.md: a browser opens them without a key)
        ("the page without a key", lambda c: c.get("/ui"), {200}),
        ("the docs without a key", lambda c: c.get("/docs"), {200}),
        ("the schema without a key", lambda c: c.get("/openapi.json"), {200}),
        ("an id over the limit", post("/v1/collections/fz/documents", {"documents": [
            {"id": "i" * 5000, "text": "t"}]}), {422}),
        ("a path outside the collections", lambda c: c.get(
            "/v1/collections/..%2F..%2Fetc/documents/passwd", headers=admin), {404, 422}),
        ("a collection name of 10,000 characters", lambda c: c.get(
            "/v1/collections/" + "n" * 10_000, headers=admin), {404, 414, 422}),
        ("a tenant header on a single-tenant collection", lambda c: c.post(
            s, json={"query": "x"}, headers={**admin, "X-Tenant": "a"}), {422}),
        ("no tenant on a multi-tenant collection", post("/v1/collections/mt/search",
                                                        {"query": "x"}), {422}),
    ]


def _nan_vector(dim: int) -> bytes:
    return ('{"vector": [NaN' + ", 0.1" * (dim - 1) + "]}").encode()


def run_hostile(c: httpx.Client, keys: Keys, keys_file: Path, p: Pass) -> None:
    dim = c.get("/v1/collections/fz", headers=bearer(keys.admin)).json()["dim"]
    for name, call, allowed in hostile_cases(keys, keys_file, dim):
        r = call(c)
        p.saw(r.request.method, r.request.url.path[:80], r.status_code, r.text)
        p.hostile.append((name, r.status_code, r.status_code in allowed, r.text[:120]))


# 2 and 3. schemathesis
def _safe(case: Any, keys: Keys) -> None:
    """Point a destructive case away from what the bench checks, and half the valid ones at
    the play collection."""
    params = case.path_parameters or {}
    if "name" in params and (params["name"] in PROTECTED or random.random() < 0.5):
        params["name"] = PLAY
    if "key_id" in params and params["key_id"] in keys.ids():
        params["key_id"] = "kfuzz0000"
    body = case.body if isinstance(case.body, dict) else None
    if body is not None and case.path == "/v1/backups/{name}/restore":
        if body.get("as") in PROTECTED:
            body["as"] = PLAY


def _record(p: Pass, case: Any, response: Any) -> None:
    text = response.text if isinstance(response.text, str) else ""
    p.saw(case.method, case.formatted_path[:80], response.status_code, text)
    try:
        case.validate_response(response)
    except (Exception, BaseExceptionGroup) as e:  # schemathesis' failures: counted by
        # title, the bench goes on
        for failure in getattr(e, "exceptions", [e]):
            title = getattr(failure, "title", type(failure).__name__)
            p.conformance[f"{title} ({case.method} {case.path} -> "
                          f"{response.status_code} {text[:80]})"] += 1


def run_schemathesis(base: str, keys: Keys, p: Pass, examples: int, scenarios: int,
                     seed: int) -> int:
    """Generated cases per operation, then stateful scenarios; returns the operations."""
    import schemathesis
    from hypothesis import HealthCheck, Phase, given, settings
    from hypothesis import seed as fixed_seed
    from hypothesis.errors import FlakyStrategyDefinition, Unsatisfiable
    from hypothesis.stateful import run_state_machine_as_test
    from schemathesis import Config, GenerationMode
    from schemathesis.core.result import Ok

    config = Config.from_dict({"auth": {"openapi": {"HTTPBearer": {"bearer": keys.admin}}},
                               "checks": CHECKS})
    schema = schemathesis.openapi.from_url(f"{base}/openapi.json", config=config,
                                           headers=bearer(keys.admin))
    schema.config.base_url = base
    ops = [r.ok() for r in schema.get_all_operations() if isinstance(r, Ok)]
    strategies = [op.as_strategy(generation_mode=m) for op in ops
                  for m in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE)]
    hsettings = settings(max_examples=examples, deadline=None, database=None,
                         suppress_health_check=list(HealthCheck), derandomize=False)
    random.seed(seed)

    for strategy in strategies:
        @fixed_seed(seed)
        @hsettings
        @given(case=strategy)
        def one(case: Any) -> None:
            _safe(case, keys)
            try:
                response = case.call(base_url=base, headers=bearer(keys.admin), timeout=60)
            except Exception as e:  # the connection itself failed: the server died
                p.server_errors.append(f"{case.method} {case.formatted_path} -> {e!r}")
                return
            _record(p, case, response)
        try:
            one()
        except Unsatisfiable:  # an operation with nothing to make invalid
            pass

    machine = schema.as_state_machine()

    class Fuzz(machine):  # type: ignore[misc, valid-type]
        def before_call(self, case: Any) -> None:
            _safe(case, keys)

        def get_call_kwargs(self, case: Any) -> dict[str, Any]:
            return {"base_url": base, "headers": bearer(keys.admin), "timeout": 60}

        def validate_response(self, response: Any, case: Any, **kwargs: Any) -> None:
            _record(p, case, response)

    one_scenario = settings(max_examples=1, stateful_step_count=8, deadline=None,
                            database=None, suppress_health_check=list(HealthCheck),
                            phases=[Phase.generate])
    for _ in range(scenarios):  # one at a time: a scenario's rules hang on the server's
        try:                    # answers, which hypothesis may find "flaky" on a replay
            run_state_machine_as_test(Fuzz, settings=one_scenario)
        except FlakyStrategyDefinition:
            p.flaky_scenarios += 1
    return len(ops)


def run(store: str, model: str, log_dir: Path, examples: int, scenarios: int, seed: int = 0
        ) -> tuple[Pass, int, int]:
    """The pass; returns it, the operations fuzzed and the tracebacks in the server's log."""
    sys.path.insert(0, str(ROOT / "tests/api"))
    sys.path.insert(0, str(ROOT / "tests"))
    from uvicorn_server import UvicornServer

    keys_file = log_dir / "keys.jsonl"
    keys = make_keys(keys_file)
    server = UvicornServer(log_dir / "fuzz-serve.log", args=["--store", store, "--model",
                                                              model],
                           env={"QKV_AUTO_TUNE": "false", "QKV_KEYS_FILE": str(keys_file),
                                "QKV_MAX_BODY_BYTES": str(2**20), "QKV_MAX_DOCUMENTS": "64",
                                "QKV_BACKUP_DIR": str(log_dir / "backups")})
    base = server.start()
    p, stop = Pass(), threading.Event()
    with httpx.Client(base_url=base, timeout=60, headers=bearer(keys.admin)) as c:
        for name, body in (("fz", {"name": "fz"}), ("mt", {"name": "mt", "multi_tenant": True}),
                           (PLAY, {"name": PLAY})):
            r = c.post("/v1/collections", json=body)
            assert r.status_code == 201, (name, r.text)
        c.post(f"/v1/collections/{PLAY}/documents", json={"documents": [
            {"id": "p1", "text": "a brown dog runs in the park", "metadata": {"n": 1}}]})
        threads = [threading.Thread(target=_writer, args=(base, keys, p, stop, seed)),
                   threading.Thread(target=_reader, args=(base, keys, p, stop, seed + 1))]
        for t in threads:
            t.start()
        operations = 0
        try:
            time.sleep(1.0)
            with httpx.Client(base_url=base, timeout=60) as bare:  # no key unless a case sends one
                run_hostile(bare, keys, keys_file, p)
            operations = run_schemathesis(base, keys, p, examples, scenarios, seed)
        finally:
            stop.set()
            for t in threads:
                t.join()
        for url, (text, tenant) in list(p.acked.items()):  # every one, once more, at the end
            check(c, keys, p, url, text, tenant)
    server.stop()
    tracebacks = server.log(10**9).count("Traceback (most recent call last)")
    return p, operations, tracebacks


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--store", choices=("lite", "faiss"), default="lite")
    ap.add_argument("--model", default="models/encoder-default")
    ap.add_argument("--examples", type=int, default=25, help="Generated cases per operation "
                    "and mode (valid, invalid).")
    ap.add_argument("--scenarios", type=int, default=40, help="Stateful scenarios.")
    ap.add_argument("--seed", type=int, default=0)
    sys.path.insert(0, str(ROOT / "bench"))
    from machine import add_results_arg, record, stamp

    add_results_arg(ap)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        store = str(Path(tmp) / "lite.db") if args.store == "lite" else f"faiss://{tmp}/f"
        t0 = time.perf_counter()
        p, operations, tracebacks = run(store, args.model, Path(tmp), args.examples,
                                        args.scenarios, args.seed)
        seconds = time.perf_counter() - t0
    command = shlex.join(["python", *sys.argv])
    wrong = [(n, s, t) for n, s, ok, t in p.hostile if not ok]
    lines = [f"## Fuzz and fault pass ({stamp()})", "", f"`{command}`", "",
             f"{args.store}: {sum(p.statuses.values()):,} requests in {seconds:.0f} s "
             f"({operations} operations): **{len(p.server_errors)} 5xx** other than 503/507, "
             f"{len(wrong)} of {len(p.hostile)} hostile inputs answered otherwise than "
             f"documented, {tracebacks} tracebacks in the server's log; "
             f"{args.scenarios} stateful scenarios ({p.flaky_scenarios} given up by "
             "hypothesis as flaky). "
             f"{len(p.acked):,} documents acknowledged, {p.reads:,} reads of them: "
             f"**{len(p.unreadable)} not readable**. Answers: "
             f"{dict(sorted(p.statuses.items()))}.", "",
             "| hostile input | answer | as documented |", "|---|---|---|"]
    lines += [f"| {n} | {s} | {'yes' if ok else '**no**'} |" for n, s, ok, _ in p.hostile]
    if wrong:
        lines += ["", "Answered otherwise than documented:",
                  *[f"- {n}: {s} `{t}`" for n, s, t in wrong]]
    if p.conformance:
        lines += ["", "Schemathesis' conformance failures (check, call, answer: times):",
                  *[f"- {k}: {v}" for k, v in p.conformance.most_common(10)]]
    for title, items in (("5xx", p.server_errors), ("Unreadable", p.unreadable)):
        if items:
            lines += ["", f"{title} (first 5):", *[f"- `{x}`" for x in items[:5]]]
    section = "\n".join(lines)
    print(section)
    record("fuzz", command, {  # the headline figures first: the summary page shows 4
        "server_errors": len(p.server_errors), "unreadable": len(p.unreadable),
        "hostile_wrong": len(wrong), "store": args.store,
        "hostile": len(p.hostile), "tracebacks": tracebacks,
        "conformance_failures": sum(p.conformance.values()),
        "flaky_scenarios": p.flaky_scenarios, "scenarios": args.scenarios,
        "requests": sum(p.statuses.values()), "operations": operations,
        "acknowledged": len(p.acked), "reads": p.reads, "seconds": round(seconds),
        "answers": {str(k): v for k, v in sorted(p.statuses.items())}},
        section=section, results=args.results)


if __name__ == "__main__":
    main()
