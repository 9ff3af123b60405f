#!/usr/bin/env python3
"""train_bench.py's bookkeeping, without PyTorch or a GPU: the warm-up covers every timed shape,
rounds merge into the best step time and the worst memory ratio, and the step-time goal reads
the mean against the fastest of PyTorch's three allocators (the medians of the workloads whose
shapes change swung by 30 % from run to run while the timed steps met new shapes)."""

import argparse
import os
import sys
import unittest

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "bench"))
import train_bench  # noqa: E402


def settings(**overrides):
    values = dict(steps=20, warmup=5, batch=8, max_seq=2048, min_seq=128, seed=1234,
                  cold_shapes=False)
    values.update(overrides)
    return argparse.Namespace(**values)


def run(allocator, workload, mean_ms, ratio):
    return {"allocator": allocator, "workload": workload, "mean_ms": mean_ms,
            "median_ms": mean_ms, "p10_ms": mean_ms, "p90_ms": mean_ms, "ratio": ratio,
            "peak_reserved_bytes": int(ratio * 100),
            "peak_allocated_bytes": 100}


class StepShapes(unittest.TestCase):
    def test_the_warm_up_runs_every_timed_shape_first(self):
        for workload in ("variable", "inference", "conv"):
            warm, timed = train_bench.step_shapes(settings(), workload)
            self.assertEqual(len(timed), 20)
            self.assertTrue(set(timed) <= set(warm), workload)
            self.assertGreaterEqual(len(warm), 5)
            # In the order the timed steps first bring them.
            self.assertEqual(warm[:len(set(timed))], list(dict.fromkeys(timed)))

    def test_the_same_shapes_in_every_process(self):
        self.assertEqual(train_bench.step_shapes(settings(), "conv"),
                         train_bench.step_shapes(settings(), "conv"))

    def test_a_fixed_workload_warms_up_for_the_steps_asked(self):
        warm, timed = train_bench.step_shapes(settings(warmup=7), "fixed")
        self.assertEqual(warm, [(8, 2048)] * 7)
        self.assertEqual(timed, [(8, 2048)] * 20)

    def test_cold_shapes_draw_the_warm_up_apart(self):
        warm, timed = train_bench.step_shapes(settings(cold_shapes=True), "conv")
        drawn = train_bench.drawn_shapes(settings(), "conv", 25)
        self.assertEqual((warm, timed), (drawn[:5], drawn[5:]))


class Rounds(unittest.TestCase):
    def test_best_step_time_and_worst_ratio(self):
        merged = train_bench.merge_rounds([[run("soma", "conv", 30.0, 1.004)],
                                           [run("soma", "conv", 20.0, 1.002)]])
        self.assertEqual(len(merged), 1)
        self.assertEqual(merged[0]["mean_ms"], 20.0)
        self.assertEqual(merged[0]["ratio"], 1.004)
        self.assertEqual(merged[0]["rounds_mean_ms"], [30.0, 20.0])

    def test_a_failed_round_is_reported(self):
        failed = {"allocator": "soma", "workload": "conv", "error": "exit 1: boom"}
        merged = train_bench.merge_rounds([[run("soma", "conv", 20.0, 1.0)], [failed]])
        self.assertEqual(merged, [failed])


class Goals(unittest.TestCase):
    def test_step_time_reads_the_fastest_of_pytorchs_allocators(self):
        results = [run("native", "conv", 21.0, 1.5), run("expandable", "conv", 20.0, 1.02),
                   run("cuda_malloc_async", "conv", 22.0, 1.06), run("soma", "conv", 20.1, 1.004)]
        train_bench.summarize(results)
        soma = results[-1]
        self.assertEqual(soma["fastest"], "expandable")
        self.assertAlmostEqual(soma["vs_fastest"], 20.1 / 20.0)
        self.assertTrue(soma["step_time_goal_met"])
        self.assertTrue(soma["ratio_goal_met"])

    def test_a_slow_step_misses_the_goal(self):
        results = [run("native", "fixed", 40.0, 1.1), run("soma", "fixed", 40.5, 1.002)]
        train_bench.summarize(results)
        self.assertFalse(results[-1]["step_time_goal_met"])
        self.assertIn("MISSED", train_bench.table(results))


class RemapSteps(unittest.TestCase):
    def test_steps_that_remapped_are_averaged_apart_from_the_others(self):
        means = train_bench.remap_step_means([10.0, 14.0, 11.0, 16.0],
                                             [[0, 0], [2, 4 << 20], [0, 0], [1, 2 << 20]])
        self.assertEqual(means, {"remap_steps": 2, "remap_steps_mean_ms": 15.0,
                                 "other_steps_mean_ms": 10.5})

    def test_a_run_without_remaps_has_no_remap_mean(self):
        means = train_bench.remap_step_means([10.0, 12.0], [[0, 0], [0, 0]])
        self.assertEqual(means["remap_steps"], 0)
        self.assertIsNone(means["remap_steps_mean_ms"])
        self.assertEqual(means["other_steps_mean_ms"], 11.0)


if __name__ == "__main__":
    unittest.main()
