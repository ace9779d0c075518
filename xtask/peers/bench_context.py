"""Strands' SummarizingConversationManager on Rein's `context_tool_loop` script (issue 43).

The same 2 000-turn tool loop as `xtask bench context`: each turn a user question, one
`lookup` call whose result is ~500 bytes, and a short answer. Strands summarizes only when
the model reports a context overflow (its `apply_management` does nothing for this manager),
so the fake model raises `ContextWindowOverflowException` when a request is estimated past
8 000 tokens — the budget of Rein's rows, by the same heuristic (UTF-8 bytes of the JSON / 4).
The summarization agent is a fake that answers with a fixed text.

Rows (sdk "strands", scenario "context_tool_loop"): cpu_per_turn_summarizing (µs, process
CPU / turns), tokens_per_request_summarizing (the estimate of each request the model answered),
prefix_stable_share_summarizing (% of answered requests whose first 4 messages equal the
previous answered request's), with the overflow count and summary calls beside them.

    BENCH_SCALE=0.1 python bench_context.py   # 200 turns
"""

from __future__ import annotations

import json
import time

from common import Recorder, scaled
from strands import Agent, tool
from strands.agent.conversation_manager import SummarizingConversationManager
from strands.models.model import Model
from strands.types.exceptions import ContextWindowOverflowException

TURNS = scaled(2000)
BUDGET = 8000
PREFIX = 4
SYSTEM = "You are a research assistant. Look pages up and answer briefly."


def usage() -> dict:
    return {"metadata": {"usage": {"inputTokens": 0, "outputTokens": 1, "totalTokens": 1}, "metrics": {"latencyMs": 0}}}


def text_events(text: str) -> list[dict]:
    return [
        {"messageStart": {"role": "assistant"}},
        {"contentBlockStart": {"start": {}}},
        {"contentBlockDelta": {"delta": {"text": text}}},
        {"contentBlockStop": {}},
        {"messageStop": {"stopReason": "end_turn"}},
        usage(),
    ]


def estimate(messages, system_prompt) -> int:
    raw = len((system_prompt or "").encode()) + sum(len(json.dumps(m).encode()) for m in messages)
    return raw // 4


class LoopModel(Model):
    """Answers turn i with a lookup of page i, then a short text; overflows past the budget."""

    def __init__(self):
        self.config = {"model_id": "fake-loop"}
        self.turn = 0
        self.tool_next = True
        self.answered = 0
        self.tokens = 0
        self.stable = 0
        self.last = None
        self.overflows = 0

    def update_config(self, **c):
        self.config.update(c)

    def get_config(self):
        return self.config

    async def structured_output(self, *a, **k):  # pragma: no cover
        raise NotImplementedError
        yield  # noqa

    async def stream(self, messages, tool_specs=None, system_prompt=None, **kwargs):
        tokens = estimate(messages, system_prompt)
        if tokens > BUDGET:
            self.overflows += 1
            raise ContextWindowOverflowException("the request is past the budget")
        self.answered += 1
        self.tokens += tokens
        prefix = json.dumps(messages[:PREFIX])
        if prefix == self.last:
            self.stable += 1
        self.last = prefix
        if self.tool_next:
            self.tool_next = False
            i = self.turn
            events = [
                {"messageStart": {"role": "assistant"}},
                {"contentBlockStart": {"start": {"toolUse": {"toolUseId": f"t{i}", "name": "lookup"}}}},
                {"contentBlockDelta": {"delta": {"toolUse": {"input": json.dumps({"page": i})}}}},
                {"contentBlockStop": {}},
                {"messageStop": {"stopReason": "tool_use"}},
                usage(),
            ]
        else:
            self.tool_next = True
            events = text_events(f"Page {self.turn} says what the user needed; noted.")
            self.turn += 1
        for e in events:
            yield e


class SummaryModel(LoopModel):
    def __init__(self):
        super().__init__()
        self.calls = 0

    async def stream(self, messages, tool_specs=None, system_prompt=None, **kwargs):
        self.calls += 1
        for e in text_events("Earlier the user asked about pages one by one; each was looked up and noted."):
            yield e


@tool
def lookup(page: int) -> str:
    """Looks a page up."""
    return f"page {page}: " + "Reference text about the subject at hand. " * 12


def main():
    rec = Recorder("context.jsonl")
    model = LoopModel()
    summarizer = SummaryModel()
    summary_agent = Agent(model=summarizer, callback_handler=None)
    agent = Agent(
        model=model,
        system_prompt=SYSTEM,
        tools=[lookup],
        callback_handler=None,
        conversation_manager=SummarizingConversationManager(summarization_agent=summary_agent),
    )
    c0 = time.process_time_ns()
    for i in range(TURNS):
        agent(f"Question {i}: what does page {i} say?")
    cpu_us = (time.process_time_ns() - c0) / 1e3 / TURNS
    extra = dict(turns=TURNS, requests=model.answered, overflows=model.overflows,
                 summary_calls=summarizer.calls, budget_tokens=BUDGET,
                 note="Strands SummarizingConversationManager (reactive: the fake model overflows past the budget)")
    rec.record("strands", "context_tool_loop", "cpu_per_turn_summarizing", cpu_us, "us", **extra)
    rec.record("strands", "context_tool_loop", "tokens_per_request_summarizing",
               model.tokens / max(1, model.answered), "tokens", **extra)
    rec.record("strands", "context_tool_loop", "prefix_stable_share_summarizing",
               model.stable * 100.0 / max(1, model.answered), "%", **extra)


if __name__ == "__main__":
    main()
