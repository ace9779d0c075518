"""http_N over real HTTP (docs/performance.md, "Over real HTTP"): N conversations at once, each a
three-turn tool conversation (tool call, tool call, text) through the SDK's OpenAI Chat
Completions model class against `xtask mock-openai` (its URL in REIN_BENCH_MOCK_URL; `xtask
bench-all` starts it). Strands: `strands.models.openai.OpenAIModel` (streamed requests);
OpenAI Agents: `OpenAIChatCompletionsModel` under `Runner.run` (unary requests). Each N runs in a
fresh process (`bench_http.py child SDK N ROUNDS`): a warm-up round, then ROUNDS measured
rounds; rows as Rein's: requests_per_s, cpu_per_model_call, overhead_per_model_call, peak_rss.

    python bench_http.py            # both SDKs, N = 1, 100, 1000 (skipped without the URL)
    HTTP_SDKS=openai-agents HTTP_NS=1,100 python bench_http.py   # a subset
"""

from __future__ import annotations

import asyncio
import json
import os
import resource
import subprocess
import sys
import time

from common import ITER_SCALE, Recorder

CALLS = 3
DELAY_MS = 20.0
# strands: the documented `client_args` (Strands opens an `AsyncOpenAI`, so an httpx client and
# its TLS context, per request); strands-shared: one `AsyncOpenAI` passed as `client=`.
SDKS = {"strands": "strands", "strands-shared": "strands_shared", "openai-agents": "openai_agents"}


def rounds() -> list[tuple[int, int]]:
    if ITER_SCALE < 1.0:
        return [(1, 10), (100, 5), (1000, 3)]
    return [(1, 40), (100, 15), (1000, 6)]


def noop(x: int) -> str:
    """Trivial sync tool."""
    return "ok"


def conversations(sdk: str, n: int, url: str):
    """N conversation factories: each returns an async callable running one conversation."""
    if sdk in ("strands", "strands_shared"):
        from strands import Agent, tool
        from strands.models.openai import OpenAIModel

        if sdk == "strands":
            model = OpenAIModel(client_args={"api_key": "sk-bench", "base_url": url}, model_id="mock")
        else:
            from openai import AsyncOpenAI

            model = OpenAIModel(client=AsyncOpenAI(api_key="sk-bench", base_url=url), model_id="mock")
        t = tool(noop)
        agents = [Agent(model=model, tools=[t], callback_handler=None) for _ in range(n)]

        def conv(a):
            async def run():
                a.messages.clear()
                await a.invoke_async("hi")
                return len(a.messages) == 6
            return run
        return [conv(a) for a in agents]
    from agents import Agent, OpenAIChatCompletionsModel, Runner, function_tool, set_tracing_disabled
    from openai import AsyncOpenAI

    set_tracing_disabled(True)
    client = AsyncOpenAI(api_key="sk-bench", base_url=url)
    model = OpenAIChatCompletionsModel(model="mock", openai_client=client)
    t = function_tool(noop)
    agents = [Agent(name="bench", model=model, tools=[t]) for _ in range(n)]

    def conv(a):
        async def run():
            r = await Runner.run(a, "hi", max_turns=8)
            return r.final_output == "Hello! How can I help you today?"
        return run
    return [conv(a) for a in agents]


async def child(sdk: str, n: int, k: int, url: str) -> dict:
    convs = conversations(sdk, n, url)

    async def one_round() -> int:
        oks = await asyncio.gather(*(c() for c in convs), return_exceptions=True)
        return sum(1 for ok in oks if ok is not True)

    failed = await one_round()
    t0, c0 = time.perf_counter(), time.process_time()
    for _ in range(k):
        failed += await one_round()
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024.0
    return {"wall_s": wall, "cpu_s": cpu, "calls": n * k * CALLS, "rounds": k, "failed": failed, "peak_rss": peak}


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "child":
        _, _, sdk, n, k = sys.argv
        print(json.dumps(asyncio.run(child(sdk, int(n), int(k), os.environ["REIN_BENCH_MOCK_URL"]))))
        return
    url = os.environ.get("REIN_BENCH_MOCK_URL")
    if not url:
        print("bench_http: REIN_BENCH_MOCK_URL is not set; no http_* rows", file=sys.stderr)
        return
    rec = Recorder("http.jsonl")
    only_sdks = os.environ.get("HTTP_SDKS", "").split(",") if os.environ.get("HTTP_SDKS") else list(SDKS)
    only_ns = {int(x) for x in os.environ["HTTP_NS"].split(",")} if os.environ.get("HTTP_NS") else None
    for sdk_name, sdk in SDKS.items():
        if sdk_name not in only_sdks:
            continue
        for n, k in rounds():
            if only_ns is not None and n not in only_ns:
                continue
            p = subprocess.run([sys.executable, __file__, "child", sdk, str(n), str(k)], capture_output=True, text=True)
            try:
                v = json.loads(p.stdout.strip().splitlines()[-1])
            except (IndexError, ValueError):
                print(f"bench_http: {sdk_name} {n} failed: {p.stderr[-2000:]}", file=sys.stderr)
                continue
            extra = dict(agents=n, rounds=k, calls=v["calls"], failed=v["failed"], server_delay_ms=DELAY_MS)
            scn = f"http_{n}"
            rec.record(sdk_name, scn, "requests_per_s", v["calls"] / v["wall_s"], "req/s", **extra)
            rec.record(sdk_name, scn, "cpu_per_model_call", v["cpu_s"] / v["calls"] * 1e6, "us", **extra)
            per_round = v["wall_s"] / k
            rec.record(sdk_name, scn, "overhead_per_model_call",
                       (per_round - CALLS * DELAY_MS / 1e3) / CALLS * 1e6, "us", **extra)
            rec.record(sdk_name, scn, "peak_rss", v["peak_rss"] / (1024 * 1024), "MiB", **extra)


if __name__ == "__main__":
    main()
