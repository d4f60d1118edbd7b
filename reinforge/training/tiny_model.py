"""Build the tiny model and tokenizer that reinforge trains by default and that the tests use.

Nothing is downloaded: a byte-level BPE tokenizer (digits split one per token, ChatML chat
template) is trained with `tokenizers` on synthetic text, and a small Qwen2-architecture causal
LM is initialised from a fixed seed. Both are saved with `save_pretrained` into a cache folder,
so every later load is the ordinary `from_pretrained(path)` a real model gets.

The build is deterministic: the same recipe gives the same files. The cache key includes the
recipe version, so changing the recipe below builds a fresh copy instead of reusing a stale one.
"""

from __future__ import annotations

import os
import random
import shutil
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

RECIPE_VERSION = 1

CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
TOOL_TOKENS = ["<tool_call>", "</tool_call>"]  # ordinary added tokens (kept when decoding), as in Qwen2.5
LARGE_VOCAB = 4096  # above this many tokens the tokenizer also learns from made-up words (the default recipe is unchanged)


@dataclass(frozen=True)
class TinyModelSpec:
    """Sizes of a tiny Qwen2 model; the defaults give about 0.12M parameters."""

    vocab_size: int = 384
    hidden_size: int = 64
    intermediate_size: int = 192
    num_hidden_layers: int = 2
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    max_position_embeddings: int = 1024
    seed: int = 0
    tool_calls: bool = False  # add <tool_call> tokens and Hermes tool-call JSON to the corpus (agent tests)

    @property
    def name(self) -> str:
        return (
            f"tiny-qwen2-v{RECIPE_VERSION}-h{self.hidden_size}-l{self.num_hidden_layers}"
            f"-v{self.vocab_size}-s{self.seed}" + ("-tools" if self.tool_calls else "")
        )


def cache_root() -> Path:
    """Where built models live: `$REINFORGE_CACHE`, else `~/.cache/reinforge`."""
    root = os.environ.get("REINFORGE_CACHE") or os.path.join(Path.home(), ".cache", "reinforge")
    return Path(root) / "models"


def _tool_call_corpus(seed: int) -> list[str]:
    """Hermes tool calls and tool answers, so that BPE learns their JSON as few tokens."""
    rng = random.Random(seed + 1)
    lines = []
    for _ in range(1500):
        name, arg = rng.choice([("calculator", "expression"), ("python", "code"), ("check_answer", "answer"), ("add", "e")])
        value = f"{rng.randrange(100)}{rng.choice('+-*')}{rng.randrange(100)}"
        lines.append(f'<tool_call>{{"name": "{name}", "arguments": {{"{arg}": "{value}"}}}}</tool_call> tool {rng.randrange(1000)}')
    return lines


def _synthetic_corpus(seed: int) -> list[str]:
    """Text covering what the built-in task and common test prompts contain."""
    rng = random.Random(seed)
    words = (
        "the a an of to and in is it that for on with as was he she they we you are be this have "
        "from or one had by word but not what all were when your can said there use each which do "
        "how their if will up other about out many then them these so some her would make like "
        "him into time has look two more write go see number no way could people my than first "
        "water been call who oil its now find long down day did get come made may part answer "
        "question sum total apples clips sold sells bought cost dollars hours minutes left each "
        "solve equation using numbers create equal target reverse sort list digits step think "
        "final boxed user assistant system please show your work in tags"
    ).split()
    lines = []
    for _ in range(4000):
        kind = rng.random()
        if kind < 0.4:
            digits = " ".join(str(rng.randrange(10)) for _ in range(rng.randrange(2, 9)))
            lines.append(f"{rng.choice(words)} {digits} {rng.choice(words)}: {digits[::-1]}")
        elif kind < 0.7:
            lines.append(" ".join(rng.choice(words) for _ in range(rng.randrange(4, 16))) + ".")
        else:
            a, b = rng.randrange(1000), rng.randrange(1000)
            op = rng.choice("+-*/=")
            lines.append(f"{a} {op} {b} = {rng.randrange(2000)} #### {a} <answer>({a}{op}{b})</answer> \\boxed{{{b}}}")
    return lines


def _pseudo_words(seed: int, count: int) -> list[str]:
    """Lines of made-up syllable words: enough distinct pieces for BPE to learn a vocabulary of tens of thousands."""
    rng = random.Random(seed)
    syllables = [c + v for c in "bcdfghjklmnprstvwz" for v in "aeiou"] + ["an", "en", "in", "on", "un", "ar", "er", "or", "st", "th"]
    return [" ".join("".join(rng.choice(syllables) for _ in range(rng.randrange(1, 5))) for _ in range(12)) for _ in range(count)]


def build_tokenizer(spec: TinyModelSpec):
    """Train the byte-level BPE tokenizer and wrap it as a transformers fast tokenizer."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Digits(individual_digits=True), pre_tokenizers.ByteLevel(add_prefix_space=False)]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=spec.vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    corpus = _synthetic_corpus(spec.seed) + (_tool_call_corpus(spec.seed) if spec.tool_calls else [])
    if spec.vocab_size > LARGE_VOCAB:  # a realistic vocabulary (benchmarks): the synthetic text alone has too few merges
        corpus += _pseudo_words(spec.seed, 40 * spec.vocab_size // 32)
    tok.train_from_iterator(corpus, trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        additional_special_tokens=["<|im_start|>"],
    )
    if spec.tool_calls:
        fast.add_tokens(TOOL_TOKENS)
    fast.chat_template = CHATML_TEMPLATE
    return fast


def build_model(spec: TinyModelSpec, tokenizer):
    """A randomly initialised Qwen2 causal LM of the spec's size (seeded, so deterministic)."""
    import torch
    from transformers import GenerationConfig, Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=spec.hidden_size,
        intermediate_size=spec.intermediate_size,
        num_hidden_layers=spec.num_hidden_layers,
        num_attention_heads=spec.num_attention_heads,
        num_key_value_heads=spec.num_key_value_heads,
        max_position_embeddings=spec.max_position_embeddings,
        tie_word_embeddings=True,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=None,
    )
    state = torch.random.get_rng_state()
    torch.manual_seed(spec.seed)
    try:
        model = Qwen2ForCausalLM(config)
    finally:
        torch.random.set_rng_state(state)
    model.generation_config = GenerationConfig(
        eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id
    )
    return model


def ensure_tiny_model(spec: TinyModelSpec | None = None, root: Path | None = None) -> Path:
    """Return the folder of the tiny model, building and caching it on first use.

    The folder is written under a temporary name and renamed into place, so a build that is
    interrupted never leaves a half-written model that a later run would load.
    """
    spec = spec or TinyModelSpec()
    root = Path(root) if root is not None else cache_root()
    target = root / spec.name
    if (target / "config.json").exists():
        return target
    root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{spec.name}-", dir=root))
    try:
        tokenizer = build_tokenizer(spec)
        model = build_model(spec, tokenizer)
        tokenizer.save_pretrained(tmp)
        model.save_pretrained(tmp, safe_serialization=True)
        (tmp / "reinforge_tiny_spec.txt").write_text(repr(asdict(spec)) + "\n")
        move_into_place(tmp, target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target


def move_into_place(tmp: Path, target: Path) -> None:
    """Rename the finished model folder `tmp` to `target`, unless another process (two first runs at once) already
    put its copy there: the builds are deterministic, so that copy is the same and `tmp` is left to be removed."""
    try:
        os.replace(tmp, target)
    except OSError:
        if not (target / "config.json").exists():
            raise
