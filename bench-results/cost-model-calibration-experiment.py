"""Experiment, in the replay: kb's rules as they are against the same rules with the ensemble's
spread scaled by the task's own measured miscalibration (the RMS of z = (log measured - predicted)
/ spread over its candidates measured so far, from 10 of them, never below 1), on every dataset
of datasets/ at 240 s.

    python bench-results/cost-model-calibration-experiment.py SEEDS OUT.json
"""
import json, math, sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
import numpy as np
from kb_tvm.replay import POLICIES, RECORDED_AS, ReplayEnv, catalog
from kb_tvm.search import task as T

def raw_predict(model, feats):
    return type(model).predict(model, feats)

orig_set, orig_obs, orig_batch = T.TaskSearch.set_predictions, T.TaskSearch.observe, T.FinePhase.batch
def set_predictions(self, batch, predictions=None):
    orig_set(self, batch, predictions)
    self._sig = None
    if batch and self.model.informed:
        mu, s = raw_predict(self.model, np.stack([c.features for c in batch]))
        self._sig = list(zip(mu, s))
def observe(self, results):
    if getattr(self, "_sig", None):
        zs = self.__dict__.setdefault("_z", [])
        for (mu, s), (lat, err) in zip(self._sig, results):
            if lat is not None and s > 0:
                zs.append((math.log(lat) - mu) / s)
    return orig_obs(self, results)
def batch(self, task, n):
    zs = getattr(task, "_z", [])
    c = max(1.0, math.sqrt(float(np.mean(np.square(zs))))) if len(zs) >= 10 else 1.0
    if c > 1.0:
        model = task.model
        model.predict = lambda f: (lambda r: (r[0], r[1] * c))(raw_predict(model, f))
        try:
            return orig_batch(self, task, n)
        finally:
            del model.predict
    return orig_batch(self, task, n)

def one(job):
    path, calibrated, seed = job
    if calibrated:
        T.TaskSearch.set_predictions, T.TaskSearch.observe, T.FinePhase.batch = set_predictions, observe, batch
    else:
        T.TaskSearch.set_predictions, T.TaskSearch.observe, T.FinePhase.batch = orig_set, orig_obs, orig_batch
    _, data = catalog.load(path)
    env = ReplayEnv(data, budget=240, strategy=RECORDED_AS["rules"])
    POLICIES["rules"]().run(env, seed=seed)
    return {"dataset": data.name, "calibrated": calibrated, "seed": seed, "auc": env.summary()["area_under_curve"],
            "seconds": env.seconds, "trials": env.trials}

if __name__ == "__main__":
    entries = catalog.entries([Path("datasets")])
    jobs = [(str(e.path), cal, s) for e in entries for s in range(int(sys.argv[1])) for cal in (False, True)]
    rows = []
    with ProcessPoolExecutor(2) as pool:
        for r in pool.map(one, jobs):
            rows.append(r); print(json.dumps(r), flush=True)
    Path(sys.argv[2]).write_text(json.dumps(rows))
