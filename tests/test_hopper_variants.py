"""The search over the Hopper GEMM template's variants, as plain Python against a made-up GPU whose
times the model gets wrong by a factor per family of variants."""

from __future__ import annotations

import pytest

from kb_tvm.schedules.hopper_gemm import GemmTile
from kb_tvm.kernels.hopper_gemm.variants import (
    VariantSearch,
    family,
    predicted_seconds,
    variants,
    without_stages,
)


def _true_seconds(tile, m, n, k):
    # the model is 30% optimistic for producer variants and 30% pessimistic for the others, so
    # its third choice on 4096^3 (128x256 without a producer) is in truth the fastest family
    return predicted_seconds(tile, m, n, k) * (1.3 if tile.producer else 0.7)


def _run(search, measure, limit=500):
    asked = 0
    while (tile := search.ask()) is not None and asked < limit:
        search.tell(tile, measure(tile))
        asked += 1
    return asked


def test_every_variant_offered_is_admitted_and_fits_the_shape():
    pool = variants(4096, 4096, 4096)
    assert len(pool) > 20
    assert all(not t.problems() and not t.fits(4096, 4096, 4096) for t in pool)
    # what never won on the H200 (setmaxnreg, clusters) is not offered
    assert not any(t.setmaxnreg or t.cluster_m > 1 for t in pool)
    assert {t.bm for t in variants(128, 768, 768)} == {64, 128}  # 256 rows: 128 of them padding
    # off the tile (a ViT's 197 tokens): every tile that pads less than a 64-row or -column strip
    ragged = variants(197, 264, 104)
    assert {(t.bm, t.bn) for t in ragged} == {(bm, bn) for bm in (64, 128, 256) for bn in (32, 64, 96)}
    assert all(t.k_splits == 1 for t in ragged)  # K = 104: under two whole K-tiles a split
    # CLIP's 77 tokens on a 7B layer: 64 or 128 blocks for 132 SMs, so split-K is offered, in the
    # splits that share its 64 K-tiles evenly
    assert {t.k_splits for t in variants(77, 4096, 4096)} == {1, 2, 4, 8}


def test_the_search_corrects_its_model_finds_the_fastest_and_measures_few():
    shape = (4096, 4096, 4096)
    search = VariantSearch(*shape)
    asked = _run(search, lambda t: _true_seconds(t, *shape))
    truth = min(search.pool, key=lambda t: _true_seconds(t, *shape))
    best_tile, best_seconds = search.best
    assert best_seconds == pytest.approx(_true_seconds(truth, *shape))
    assert not best_tile.producer  # it left the family the model preferred
    assert asked < len(search.pool) / 3


@pytest.mark.parametrize("shape", [(128, 768, 768), (1024, 3072, 768), (4096, 4096, 4096)])
def test_the_first_measurements_go_to_different_tiles_at_four_stages_not_to_one_tiles_depths(shape):
    # the depth moved the H200's times a median 6%: a tile's other depths wait until they are
    # the most promising, while other tiles' predictions may be off by far more
    search = VariantSearch(*shape)
    asked = []
    for _ in range(6):
        asked.append(search.ask())
        search.tell(asked[-1], _true_seconds(asked[-1], *shape))
    assert asked[0].stages == 4
    assert len({without_stages(t) for t in asked}) >= 4
    first_depths = {}
    for tile in asked:
        first_depths.setdefault(without_stages(tile), tile.stages)
    assert set(first_depths.values()) == {4}


def test_a_variant_that_failed_is_never_the_best():
    shape = (128, 768, 768)
    search = VariantSearch(*shape, patience=3)
    first = search.ask()
    search.tell(first, None)  # computed wrong: a failed candidate, not a record
    _run(search, lambda t: _true_seconds(t, *shape))
    assert search.best[0] != first
    assert search.measured[first] is None


def test_it_stops_once_nothing_left_is_predicted_to_beat_the_best():
    shape = (4096, 4096, 4096)
    search = VariantSearch(*shape, patience=2, min_gain=0.5)
    # the model exactly right: after two measurements nothing is expected to gain 50% over the best
    asked = _run(search, lambda t: predicted_seconds(t, *shape))
    assert asked == 2 and search.ask() is None


def test_a_search_rebuilt_from_its_records_asks_what_the_original_would():
    shape = (128, 3072, 768)
    original = VariantSearch(*shape)
    records = []
    for _ in range(4):
        tile = original.ask()
        seconds = _true_seconds(tile, *shape)
        original.tell(tile, seconds)
        records.append(VariantSearch.record(tile, seconds))
    resumed = VariantSearch(*shape)
    resumed.replay(records)
    assert resumed.ask() == original.ask()
    assert family(resumed.best[0]) == family(original.best[0])


def test_bad_inputs_are_refused_with_the_rule():
    with pytest.raises(ValueError, match=r"no Hopper GEMM variant fits 100x768x100: K=100 is not a multiple of 8"):
        VariantSearch(100, 768, 100)
    with pytest.raises(ValueError, match="patience=0"):
        VariantSearch(128, 768, 768, patience=0)
    search = VariantSearch(128, 768, 768)
    stranger = variants(4096, 4096, 4096)[-1]
    with pytest.raises(ValueError, match="is not a variant of 128x768x768"):
        search.tell(stranger, 1e-3)


def test_split_k_is_offered_for_tilings_under_a_wave_with_two_k_tiles_a_split():
    from kb_tvm.kernels.hopper_gemm.variants import SMS, variants

    small = variants(128, 768, 3072, b_layout="kn")  # BERT's FFN down: 24 tiles of 64x64
    splits = {t.k_splits for t in small}
    assert splits == {1, 2, 3, 4, 6, 8}
    assert all(3072 // (t.bk * t.k_splits) >= 2 for t in small)
    big = variants(4096, 4096, 4096, b_layout="kn")
    assert {t.k_splits for t in big} == {1}  # a full wave or more: nothing to gain
    assert all((4096 // t.bm) * (4096 // t.bn) >= SMS or t.k_splits == 1 for t in big)


def test_persistent_blocks_are_offered_for_tilings_over_a_wave_with_a_producer():
    from kb_tvm.kernels.hopper_gemm.variants import SMS

    big = variants(4096, 4096, 4096)
    persistent = [t for t in big if t.persistent]
    assert persistent and all(t.producer and (4096 // t.bm) * (4096 // t.bn) > SMS for t in persistent)
    # each is the non-persistent variant's twin, ranked by the model as a little faster
    for tile in (t for t in persistent if not t.pingpong):
        twin = next(t for t in big if not t.persistent and t.describe() + ", persistent=True" == tile.describe())
        assert predicted_seconds(tile, 4096, 4096, 4096) < predicted_seconds(twin, 4096, 4096, 4096)
    assert not any(t.persistent for t in variants(128, 768, 768))  # under a wave: no tile to walk on to


def test_ping_pong_is_offered_beside_each_persistent_single_warpgroup_tile_as_families_of_its_own():
    big = variants(4096, 3072, 768)  # 4096x3072x768: where ping-pong won 12% on the H200
    pingpong = {(t.bm, t.bn, t.stages) for t in big if t.pingpong}
    single = {(t.bm, t.bn, t.stages) for t in big if t.persistent and t.consumers == 1}
    assert pingpong and pingpong == single
    assert all(t.persistent and t.producer and t.consumers == 2 for t in big if t.pingpong)
    assert not any(t.pingpong for t in variants(128, 768, 768))  # under a wave: nothing to take turns on
    # families of its own, one per warpgroup's rows: after a cooperative tile and a 64-row
    # ping-pong tile of BN 128 are measured, a 128-row one is still as uncertain as a new family
    wide = GemmTile(bm=128, bn=128, stages=4, consumers=2, producer=True, persistent=True, pingpong=True)
    narrow = GemmTile(bm=64, bn=128, stages=4, consumers=2, producer=True, persistent=True, pingpong=True)
    cooperative = GemmTile(bm=128, bn=128, stages=4, consumers=2, producer=True, persistent=True)
    assert len({family(wide), family(narrow), family(cooperative)}) == 3
    search = VariantSearch(4096, 3072, 768)
    search.tell(cooperative, 44e-6)
    search.tell(narrow, 52e-6)
    assert search.spread(wide) == max(search.spread(t) for t in search.pool)  # a family not measured yet


def test_a_batch_counts_as_that_many_times_the_tiles():
    # 12 heads of 128x128x64: 48 blocks of 64x64, under a wave (no persistent blocks), and a
    # batched B[K, N] needs whole K-tiles (K = 64 has them)
    heads = variants(128, 128, 64, b_layout="kn", batch=12, b_batched=True)
    assert heads and not any(t.persistent for t in heads)
    one = GemmTile(bm=64, bn=64, stages=2, b_layout="kn")
    assert predicted_seconds(one, 128, 128, 64, batch=12) == predicted_seconds(one, 128, 128, 64)  # one wave
    assert predicted_seconds(one, 128, 128, 64, batch=96) > predicted_seconds(one, 128, 128, 64)  # three
    many = variants(128, 128, 64, b_layout="kn", batch=96, b_batched=True)  # 384 blocks: over a wave
    assert any(t.persistent for t in many)
    search = VariantSearch(128, 128, 64, b_layout="kn", batch=12, b_batched=True)
    assert search.ask() in heads
    assert variants(128, 128, 96, b_layout="kn", batch=12, b_batched=True) == []  # K = 96: not whole K-tiles
