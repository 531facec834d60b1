"""How well the search's cost model knows its own error, in the replay: for every candidate kb's
rules measure after the model is informed, z = (log measured - predicted mean) / predicted spread
(the ensemble's sigma, which the expected gain and the exploration weigh). A calibrated model
gives std(z) near 1 and P(z < -2) near 2%.

    python bench-results/cost-model-calibration.py DATASET...   (names in datasets/, 240 s, seed 0)
"""
import math, sys, numpy as np
from pathlib import Path
from kb_tvm.replay import ReplayEnv, Dataset
from kb_tvm.replay.policies import RulesPolicy
from kb_tvm.search import task as T

rec = []
orig_set, orig_obs = T.TaskSearch.set_predictions, T.TaskSearch.observe
def set_predictions(self, batch, predictions=None):
    orig_set(self, batch, predictions)
    if batch and self.model.informed:
        mu, sigma = self.model.predict(np.stack([c.features for c in batch]))
        self._kb_sig = list(zip(mu, sigma))
    else:
        self._kb_sig = None
def observe(self, results):
    sig = getattr(self, "_kb_sig", None)
    if sig:
        for (mu, s), (lat, err) in zip(sig, results):
            if lat is not None and s > 0:
                rec.append(((math.log(lat) - mu) / s, s, math.log(lat) - mu))
    return orig_obs(self, results)
T.TaskSearch.set_predictions, T.TaskSearch.observe = set_predictions, observe

for name in sys.argv[1:]:
    rec.clear()
    ds = Dataset.load(Path("datasets") / f"{name}.jsonl.gz")
    env = ReplayEnv(ds, budget=240)
    RulesPolicy().run(env, seed=0)
    z = np.array([r[0] for r in rec]); s = np.array([r[1] for r in rec]); e = np.array([r[2] for r in rec])
    print(f"{name[:45]:45s} n={len(z)} std(z)={z.std():.2f} mean|z|={np.abs(z).mean():.2f} "
          f"median sigma={np.median(s):.3f} rms err={np.sqrt((e**2).mean()):.3f} P(z<-2)={np.mean(z<-2):.3f}")
