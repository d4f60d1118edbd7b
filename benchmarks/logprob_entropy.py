"""Log-probs of the sampled tokens and the policy's entropy from the logits, forward and backward:
reinforge's `log_probs_from_logits` vs TRL's `selective_log_softmax_and_entropy`, on the same logits.

    python benchmarks/logprob_entropy.py [--repeats 5] [--threads 2]

Both take fp32 logits (rows, vocabulary), the tokens and a temperature, and return per-row
log-probs and entropies; the loss back-propagated is sum(w * log p) + 0.01 * sum(H) (an
entropy bonus, so the entropy's gradient is computed too). Shapes: the medium model's update in
`grpo_step_vs_trl.py` (64 x 64 response tokens, vocabulary 32768) and a Qwen2.5-size vocabulary
(151936) with 1024 tokens. Each case runs both in turn (the order alternates) and reports the
median forward and backward time; the memory is the highest resident memory above what the
process held before the pass (the kernel's high-water mark; the logits' gradient, which both
return, included), each measured in a fresh process, where no freed memory is reused. Both results are
checked against each other before timing.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import statistics
import time

import torch
from grpo_step_vs_trl import PeakMemory  # benchmarks/grpo_step_vs_trl.py

from reinforge.algorithm import log_probs_from_logits

CASES = [("medium model's update", 4096, 32768, 1.0), ("Qwen2.5 vocabulary", 1024, 151936, 0.7)]


def trl_function():
    from trl.trainer.utils import selective_log_softmax_and_entropy

    def trl(logits, tokens, temperature):
        return selective_log_softmax_and_entropy(logits, tokens, temperature=temperature)
    return trl


def case_inputs(rows: int, vocab: int):
    generator = torch.Generator().manual_seed(0)
    logits = (torch.randn(rows, vocab, generator=generator) * 2).requires_grad_()
    return logits, torch.randint(0, vocab, (rows,), generator=generator), torch.randn(rows, generator=generator)


def fresh_process_memory(conn, key: str, rows: int, vocab: int, temperature: float, threads: int) -> None:
    torch.set_num_threads(threads)
    fn = log_probs_from_logits if key == "reinforge" else trl_function()
    conn.send(one_pass(fn, *case_inputs(rows, vocab), temperature)["memory_mb"])


def one_pass(fn, logits, tokens, weights, temperature) -> dict:
    logits.grad = None
    with PeakMemory() as memory:
        start = time.perf_counter()
        log_probs, entropy = fn(logits, tokens, temperature)
        forward = time.perf_counter() - start
        ((weights * log_probs).sum() + 0.01 * entropy.sum()).backward()
        backward = time.perf_counter() - start - forward
    return {"forward": forward, "backward": backward, "memory_mb": memory.peak - memory.start,
            "outputs": (log_probs.detach(), entropy.detach()), "grad": logits.grad}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    impls = {"reinforge": log_probs_from_logits, "TRL": trl_function()}
    spawn = mp.get_context("spawn")
    print(f"torch {torch.__version__}, {args.threads} threads; forward and backward of log-probs and entropy, fp32")
    print(f"{'case':40s} {'':10s} {'forward s':>10s} {'backward s':>11s} {'memory MB':>10s}")
    for name, rows, vocab, temperature in CASES:
        logits, tokens, weights = case_inputs(rows, vocab)
        check = {key: one_pass(fn, logits, tokens, weights, temperature) for key, fn in impls.items()}
        (lp_a, ent_a), (lp_b, ent_b) = check["reinforge"]["outputs"], check["TRL"]["outputs"]
        grad_diff = (check["reinforge"]["grad"] - check["TRL"]["grad"]).abs().max().item()
        assert torch.allclose(lp_a, lp_b, atol=1e-4) and torch.allclose(ent_a, ent_b, atol=1e-4), "outputs differ"
        assert grad_diff < 1e-5, f"gradients differ by {grad_diff:.1e}"
        del check
        runs = {key: [] for key in impls}
        for index in range(args.repeats):
            for key in (list(impls) if index % 2 == 0 else list(impls)[::-1]):
                result = one_pass(impls[key], logits, tokens, weights, temperature)
                del result["outputs"], result["grad"]
                runs[key].append(result)
        label = f"{name} ({rows} x {vocab}, T={temperature})"
        for key, rows_ in runs.items():
            med = {field: statistics.median(r[field] for r in rows_) for field in ("forward", "backward")}
            receiver, sender = spawn.Pipe(duplex=False)
            child = spawn.Process(target=fresh_process_memory, args=(sender, key, rows, vocab, temperature, args.threads))
            child.start()
            sender.close()  # the child's end only: its failure ends the receive
            memory = receiver.recv()
            child.join()
            print(f"{label:40s} {key:10s} {med['forward']:10.3f} {med['backward']:11.3f} {memory:10.0f}", flush=True)
            label = ""
        print(f"{'':40s} same results: largest gradient difference {grad_diff:.1e}")


if __name__ == "__main__":
    main()
