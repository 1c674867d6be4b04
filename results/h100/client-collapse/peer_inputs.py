"""What SGLang's bench_serving (0.4.9.post2, a single file) needs to send specexp's requests:
a word-level tokenizer of the prompts' words (its random dataset draws prompts through a
tokenizer; the server tokenizes the text with its own vocabulary) and ShareGPT-shaped rows
whose first turn is a fresh prompt as specexp makes it (workload.prompts=fresh: a seeded
12-word prefix, then the workload's prompt).
    python peer_inputs.py DIR    (writes DIR/tok/ and DIR/prompts.json; prints the prompt's
                                  length in the tokenizer's tokens: --random-input-len)"""

import json
import random
import sys
from pathlib import Path

from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

from specexp.core.schemas.workload import PREFIX_WORDS

PROMPT = (
    "Write a detailed technical essay on how speculative decoding accelerates large language "
    "model inference, covering draft models, verification, acceptance rates and batching."
)


def main(out: Path) -> None:
    pre = pre_tokenizers.Whitespace()
    words = [w for w, _ in pre.pre_tokenize_str(" ".join(PREFIX_WORDS) + ". " + PROMPT)]
    vocab = {"[UNK]": 0, **{w: i + 1 for i, w in enumerate(dict.fromkeys(words))}}
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre
    fast = PreTrainedTokenizerFast(tokenizer_object=tokenizer, unk_token="[UNK]")
    fast.save_pretrained(out / "tok")
    rng = random.Random(0)
    rows = [
        {
            "conversations": [
                {
                    "from": "human",
                    "value": " ".join(rng.choices(PREFIX_WORDS, k=12)) + ". " + PROMPT,
                },
                {"from": "gpt", "value": "-"},
            ]
        }
        for _ in range(4000)
    ]
    (out / "prompts.json").write_text(json.dumps(rows))
    print(len(fast.encode(rows[0]["conversations"][0]["value"])))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
