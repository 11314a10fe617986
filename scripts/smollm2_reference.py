#!/usr/bin/env python3
"""Reference token ids for SmolLM2 from an independent tokenizer: Hugging Face `tokenizers`.

Builds the model's own tokenizer (byte-level BPE with the vocabulary and merges stored in the
GGUF file, SmolLM2's pre-tokenizer: individual digits, then GPT-2's byte-level split, its
control tokens as special tokens) and prints the ids of each input file, space separated, one
line per file. tests/test_tokenizer_smollm2.c compares inferlab's ids with these.

Usage: pip install gguf tokenizers
       scripts/smollm2_reference.py MODEL.gguf TEXT_FILE... > ids.txt
"""
import sys

import gguf
from tokenizers import Tokenizer, decoders, models, pre_tokenizers


def field_strings(reader, key):
    f = reader.fields[key]
    return [bytes(f.parts[i]).decode("utf-8") for i in f.data]


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    r = gguf.GGUFReader(sys.argv[1])
    pre = bytes(r.fields["tokenizer.ggml.pre"].parts[-1]).decode()
    if pre != "smollm":
        sys.exit(f"{sys.argv[1]}: tokenizer.ggml.pre is '{pre}', expected 'smollm'")
    tokens = field_strings(r, "tokenizer.ggml.tokens")
    merges = [tuple(m.split(" ", 1)) for m in field_strings(r, "tokenizer.ggml.merges")]
    tt = r.fields["tokenizer.ggml.token_type"]
    types = [int(tt.parts[i][0]) for i in tt.data]
    tok = Tokenizer(models.BPE({t: i for i, t in enumerate(tokens)}, merges))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
    ])
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([t for t, ty in zip(tokens, types) if ty == 3])
    for path in sys.argv[2:]:
        text = open(path, encoding="utf-8", newline="").read()
        ids = tok.encode(text, add_special_tokens=False).ids
        print(" ".join(map(str, ids)))


if __name__ == "__main__":
    main()
