"""One line per shape of attention_h200.py's JSON: right or not, the fastest tile, the default, torch."""

import json
import sys

for row in json.load(open(sys.argv[1])):
    right = [t for t in row["tiles"] if t.get("vs_numpy") == "ok"]
    best = min(right, key=lambda t: t["ms"]) if right else None
    wrong = [t["tile"] + ": " + (t.get("vs_numpy") or t.get("error", "?")) for t in row["tiles"] if t not in right]
    print(f"{row['shape']}: {len(right)}/{len(row['tiles'])} tiles right; best "
          + (f"{best['ms']:.4f} ms ({best['tile']})" if best else "none")
          + f"; default {row['default_ms']:.4f} ms ({row['default_vs_numpy']}); torch sdpa {row['torch_sdpa_ms']:.4f} ms"
          + (f"; wrong: {wrong}" if wrong else ""))
