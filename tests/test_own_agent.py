"""The book's own-agent example (docs/architecture.md) runs as printed: samples with only an id (and a label), a
SimpleAgent subclass, the real runner and records."""

from __future__ import annotations

import re

from balms import metrics
from balms.paths import PROJECT_ROOT
from fake_servers import FakeBackend


def test_readme_example_runs_with_any_sample(tmp_path, monkeypatch):
    src = (PROJECT_ROOT / "docs" / "architecture.md").read_text()
    block = re.search(r"## Your own agent.*?```python\n(.*?)```", src, re.S).group(1)
    import balms.models.registry as reg

    monkeypatch.setattr(reg, "get_backend", lambda name=None, **kw: FakeBackend(name=name))
    monkeypatch.chdir(tmp_path)
    ns: dict = {}
    exec(compile(block, "README.md", "exec"), ns)  # noqa: S102 - our README's example
    recs = ns["load_records"]("runs/mine/rate.jsonl")
    assert [r.sample_id for r in recs] == ["n1", "n2"]
    assert all(r.system == "rate-stress" and r.prediction in range(1, 6) and r.user == "" for r in recs)
    assert recs[0].label == 4 and recs[0].n_steps == 1 and recs[0].transcript[0].kind == "prompt"
    assert "Slept badly" in recs[0].transcript[0].content
    assert metrics.mae(recs) >= 0
