#!/usr/bin/env python3
"""rssm's verify window beside the published ones, from one run's JSON files:
bench/verify_graph.py's (rssm_layer_verify) and bench/verify_peers.py's
(vLLM's Triton spec-decode kernels), both per layer from torch in captured CUDA
graphs, bf16 activations and raw gates. Writes a Markdown table: for each state
dtype, batch and window length present in both, rssm's window, the fastest
vLLM window and which kernel it was, their ratio, and the time per accepted
token at 100% acceptance.

    bench/verify_compare.py RUN/verify_graph.json RUN/verify/verify_peers.json > peers.md
"""

import json
import sys


def main(ours_path, peers_path):
    ours = json.load(open(ours_path))
    peers = json.load(open(peers_path))
    mine = {(r["gate"], r["state"], r["batch"], r["T"]): r for r in ours["rows"]}
    best = {}
    for r in peers["rows"]:
        key = (r["gate"], r["state"], r["batch"], r["T"])
        if key not in best or r["window_us"] < best[key]["window_us"]:
            best[key] = r
    print(f"rssm {ours['info']['rssm']} ({ours['info']['backend']}, {ours['info']['ring_dtype']} ring, "
          f"L = {ours['info']['ring_len']}) against vLLM ({peers['info']['vllm']}), "
          f"{ours['info']['device']}, torch {ours['info']['torch']}; µs per layer per window, "
          "token = window / T at 100% acceptance.\n")
    print("| gate | state | B | T | rssm window | vLLM window (kernel) | rssm / vLLM | rssm token | vLLM token |")
    print("|---|---|---|---|---|---|---|---|---|")
    for key in sorted(set(mine) & set(best), key=lambda k: (k[0], k[1] != "fp32", k[2], k[3])):
        m, p = mine[key], best[key]
        print(f"| {key[0]} | {key[1]} | {key[2]} | {key[3]} | {m['window_us']:.2f} | "
              f"{p['window_us']:.2f} ({p['kernel']}) | {m['window_us'] / p['window_us']:.2f}× | "
              f"{m['window_us'] / key[3]:.2f} | {p['window_us'] / key[3]:.2f} |")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
