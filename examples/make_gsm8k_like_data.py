"""Write small GSM8K-format parquet files (verl's schema, data_source openai/gsm8k) with no download.

The problems are generated word problems with verl's GSM8K instruction suffix; the ground truth
is the number after '####', so the built-in GSM8K scorer grades them exactly as it grades GSM8K.

    python examples/make_gsm8k_like_data.py --out ~/data/gsm8k_like --train 256 --test 64
"""

from __future__ import annotations

import argparse
import random
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

INSTRUCTION = 'Let\'s think step by step and output the final answer after "####".'
NAMES = ["Natalia", "Tom", "Weng", "Betty", "Julie", "James", "Albert", "Ken"]
ITEMS = ["clips", "apples", "books", "stickers", "pencils", "cards"]


def problem(rng: random.Random) -> tuple[str, int]:
    name, item = rng.choice(NAMES), rng.choice(ITEMS)
    a, b = rng.randint(2, 40), rng.randint(2, 40)
    if rng.random() < 0.5:
        return f"{name} has {a} {item} and gets {b} more. How many {item} does {name} have now?", a + b
    return f"{name} buys {a} boxes with {b} {item} in each box. How many {item} does {name} buy?", a * b


def rows(count: int, split: str, seed: int) -> list[dict]:
    rng = random.Random(seed)
    out = []
    for index in range(count):
        question, answer = problem(rng)
        out.append({
            "data_source": "openai/gsm8k",
            "prompt": [{"role": "user", "content": f"{question} {INSTRUCTION}"}],
            "ability": "math",
            "reward_model": {"style": "rule", "ground_truth": str(answer)},
            "extra_info": {"split": split, "index": index, "question": question},
        })
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="~/data/gsm8k_like")
    parser.add_argument("--train", type=int, default=256)
    parser.add_argument("--test", type=int, default=64)
    args = parser.parse_args()
    out = Path(args.out).expanduser()
    out.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows(args.train, "train", 0)), out / "train.parquet")
    pq.write_table(pa.Table.from_pylist(rows(args.test, "test", 1)), out / "test.parquet")
    print(f"wrote {out / 'train.parquet'} and {out / 'test.parquet'}")


if __name__ == "__main__":
    main()
