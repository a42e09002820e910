"""Unit tests of the peer's pure parts: the fake model's script, the state check, the
calculator, the percentiles and the comparison's derived figure and ratios. Run with the
peer's venv: target/peer-venv/bin/python -m unittest discover -s benches/peer
"""

from __future__ import annotations

import json
import unittest

import compare
import fake_model
from agent import evaluate
from drive import check
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from report import percentile


def state_for(steps: int) -> list:
    """The messages a correct run leaves, built from the fake model's own replies."""
    messages = [HumanMessage("bench task 0")]
    for done in range(steps + 1):
        reply = fake_model.reply_for(done, steps)["choices"][0]["message"]
        calls = [
            {
                "id": c["id"],
                "name": c["function"]["name"],
                "args": json.loads(c["function"]["arguments"]),
            }
            for c in reply.get("tool_calls", [])
        ]
        messages.append(AIMessage(reply["content"], tool_calls=calls))
        for call in calls:
            result = str(int(evaluate(call["args"]["expression"])))
            messages.append(ToolMessage(result, tool_call_id=call["id"]))
    return messages


class FakeModelScript(unittest.TestCase):
    def test_calculate_steps_then_the_answer(self):
        first = fake_model.reply_for(0, 2)
        call = first["choices"][0]["message"]["tool_calls"][0]
        self.assertEqual(call["id"], "call_0")
        self.assertEqual(call["function"]["arguments"], '{"expression":"0+1"}')
        self.assertEqual(first["choices"][0]["finish_reason"], "tool_calls")
        answer = fake_model.reply_for(2, 2)["choices"][0]
        self.assertNotIn("tool_calls", answer["message"])
        self.assertIn("done after 2 steps", answer["message"]["content"])
        self.assertEqual(fake_model.reply_for(2, 2)["usage"]["prompt_tokens"], 1000)


class StateCheck(unittest.TestCase):
    def test_a_correct_run_passes(self):
        self.assertEqual(check(state_for(5), 5), (6, None))
        self.assertEqual(check(state_for(0), 0), (1, None))

    def test_a_missing_tool_result_fails(self):
        messages = [
            m for m in state_for(3) if not (isinstance(m, ToolMessage) and m.content == "2")
        ]
        self.assertIn("expected 4 and 3", check(messages, 3)[1])

    def test_a_wrong_result_fails(self):
        messages = state_for(2)
        messages[2] = ToolMessage("7", tool_call_id="call_0")
        self.assertIn("tool result 0 is '7'", check(messages, 2)[1])

    def test_an_unfinished_run_fails(self):
        self.assertIsNotNone(check(state_for(3), 2)[1])


class Calculator(unittest.TestCase):
    def test_arithmetic(self):
        self.assertEqual(evaluate("0+1"), 1)
        self.assertEqual(evaluate("(2 + 3) * 4 ^ 2"), 80)
        self.assertEqual(evaluate("-3 % 2"), 1)

    def test_no_names_or_calls(self):
        for expression in ("__import__('os')", "x", "len('a')", "1 if 1 else 2"):
            with self.assertRaises(ValueError):
                evaluate(expression)


class Figures(unittest.TestCase):
    def test_nearest_rank_percentiles_as_agentd_bench(self):
        values = [5.0, 1.0, 4.0, 2.0, 3.0]
        self.assertEqual(percentile(values, 50), 3.0)
        self.assertEqual(percentile(values, 99), 5.0)
        self.assertEqual(percentile(values, 0), 1.0)
        self.assertEqual(percentile([], 50), 0.0)

    def test_agentd_host_cpu_without_its_bench_process(self):
        result = compare.derive({"recursions": 1000, "host_busy_cpu_s": 2.0, "bench_cpu_s": 0.5})
        self.assertAlmostEqual(result["host_cpu_ms_per_recursion_without_model"], 1.5)
        peer = compare.derive({"recursions": 10, "host_cpu_ms_per_recursion_without_model": 9.0})
        self.assertEqual(peer["host_cpu_ms_per_recursion_without_model"], 9.0)

    def test_ratios_say_how_many_times_better_agentd_is(self):
        self.assertEqual(compare.better("ms_per_recursion_p50", 2.0, 6.0), "3.00x")
        self.assertEqual(compare.better("recursions_per_s", 1000.0, 100.0), "10.00x")
        self.assertEqual(compare.better("wall_s", None, 3.0), "-")

    def test_medians_per_load_and_system(self):
        runs = [
            {"round": r, "load": "l", "system": "agentd", "result": {"wall_s": w}}
            for r, w in ((1, 3.0), (2, 1.0), (3, 2.0))
        ] + [{"round": 1, "load": "l", "system": "langgraph", "error": "failed"}]
        table = compare.medians(runs)
        self.assertEqual(table[("l", "agentd")]["wall_s"], 2.0)
        self.assertNotIn(("l", "langgraph"), table)


if __name__ == "__main__":
    unittest.main()
