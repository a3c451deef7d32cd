#!/usr/bin/env bash
# Prints the fastest training dtype of this CPU, the recipes' default DTYPE: mixed_bfloat16
# where /proc/cpuinfo shows bfloat16 units (AVX512-BF16 or AMX-BF16), else float32.
# One place for the rule, so every recipe chooses alike (bench/README.md has the speedups).
grep -qwE 'avx512_bf16|amx_bf16' /proc/cpuinfo 2>/dev/null && echo mixed_bfloat16 || echo float32
