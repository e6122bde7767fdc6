"""Raw files with no rows (issue 37): a PMData file of `[]` or a CSV of its header alone is handled, said in the
notes and counted in `dropped`; an empty (0-byte) file is a DataError naming it and what was expected."""

from __future__ import annotations

import pytest

from balms.data.pmdata import WELLNESS_COLUMNS, load_pmdata
from balms.data.schema import DataError

EMPTY = [("fitbit/sleep.json", "[]"), ("fitbit/exercise.json", "[]"), ("fitbit/resting_heart_rate.json", "[]"),
         ("fitbit/very_active_minutes.json", "[]"), ("fitbit/sleep_score.csv", "timestamp,overall_score\n"),
         ("pmsys/wellness.csv", ",".join(WELLNESS_COLUMNS) + "\n")]


@pytest.fixture()
def pm_link(pmdata_dir, tmp_path):
    """PMData's p01 and p02 as links to the real files, so one file can be replaced without a copy."""
    root = tmp_path / "pmdata"
    root.mkdir()
    (root / "participant-overview.xlsx").symlink_to(pmdata_dir / "participant-overview.xlsx")
    for u in ("p01", "p02"):
        for sub in ("fitbit", "pmsys"):
            (root / u / sub).mkdir(parents=True)
            for f in (pmdata_dir / u / sub).iterdir():
                (root / u / sub / f.name).symlink_to(f)
    return root


def _replace(path, text):
    path.unlink()
    path.write_text(text)


@pytest.mark.parametrize(("rel", "text"), EMPTY, ids=[r for r, _ in EMPTY])
def test_a_file_of_no_rows_is_handled_said_and_counted(pm_link, rel, text):
    whole = load_pmdata(pm_link)
    _replace(pm_link / "p01" / rel, text)
    t = load_pmdata(pm_link)
    name = rel.split("/")[1]
    assert t.dropped[f"users_with_empty_{name}"] == 1
    assert f"p01: {rel} holds no records; nothing of it for this user" in t.notes
    p02 = t.daily.xs("p02", level="user")
    assert p02.equals(whole.daily.xs("p02", level="user"))  # the other user is untouched
    if name == "wellness.csv":
        assert "p01" not in set(t.labels["user"]) and "p01" in set(whole.labels["user"])
    elif name == "sleep.json":
        p01 = t.daily.xs("p01", level="user")
        assert p01[["sleep_minutes", "time_in_bed", "sleep_minutes_paper"]].isna().all().all()


@pytest.mark.parametrize(("rel", "expected"), [("fitbit/sleep.json", "expected a JSON list of records"),
                                               ("pmsys/wellness.csv", "expected a header row with ['effective"),
                                               ("fitbit/sleep_score.csv", "expected a header row with ['timestamp'")])
def test_an_empty_file_is_named_with_what_was_expected(pm_link, rel, expected):
    _replace(pm_link / "p01" / rel, "")
    with pytest.raises(DataError, match=rf"p01/{rel}: empty file: {expected}".replace("[", r"\[")):
        load_pmdata(pm_link)



def test_a_globem_csv_of_a_header_alone_is_said_and_counted(globem_dir, tmp_path):
    """A GLOBEM label or platform file with its header and no row loads as no data, named in the notes and counted."""
    import shutil

    from balms.data.globem import load_globem

    cohort = next(p for p in sorted(globem_dir.iterdir()) if (p / "SurveyData").is_dir())
    copy = tmp_path / cohort.name
    shutil.copytree(cohort, copy)
    before = load_globem(copy)
    assert "files_with_no_rows" not in before.dropped
    platform = copy / "ParticipantsInfoData" / "platform.csv"
    platform.write_text(platform.read_text().splitlines()[0] + "\n")
    after = load_globem(copy)
    assert after.dropped["files_with_no_rows"] == 1
    assert any("platform.csv: a header and no rows" in n for n in after.notes)
