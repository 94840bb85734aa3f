"""Workload and profile files: valid ones load, bad ones fail with one clear line."""

import copy
import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "sim"))
from synth import profile

from specon.workload import WorkloadError, load_workload


def good() -> dict:
    return {
        "format": "specon-workload/v1",
        "cluster": {"workers": [{"name": "w1", "cpus": 4}, {"name": "w2", "cpus": 4,
                                                             "speed": 1.5}]},
        "profiles": {"p": "p.json"},
        "jobs": [{"name": "a", "profile": "p", "submit_s": 0},
                 {"name": "b", "profile": "p", "submit_s": 12.5, "work_scale": 2,
                  "target_loss": 0.5, "deadline_s": 600, "migratable": False}],
    }


def write(tmp: Path, data: dict, prof: dict | None = None) -> Path:
    (tmp / "p.json").write_text(json.dumps(prof if prof is not None else profile("p")))
    path = tmp / "wl.json"
    path.write_text(json.dumps(data))
    return path


def test_valid_workload_loads_with_relative_profile(tmp_path):
    wl = load_workload(write(tmp_path, good()))
    assert [j.name for j in wl.jobs] == ["a", "b"]
    assert wl.profiles["p"].iterations == 600
    assert wl.cluster.workers[1].speed == 1.5 and wl.jobs[1].migratable is False


def test_yaml_is_accepted(tmp_path):
    import yaml

    write(tmp_path, good())
    path = tmp_path / "wl.yaml"
    path.write_text(yaml.safe_dump(good()))
    assert len(load_workload(path).jobs) == 2


def test_speed_interpolates_and_caps():
    from specon.workload.models import Profile

    p = Profile.model_validate(profile("x", speedup={"1": 1.0, "2": 1.5, "4": 0.9}))
    assert p.speed(1) == 1.0 and p.speed(3) == pytest.approx(1.2)
    assert p.speed(8) == pytest.approx(0.9) and p.speed(0.5) == pytest.approx(0.5)
    assert p.max_cores == 4


def mutate(fn):
    data = copy.deepcopy(good())
    fn(data)
    return data


CASES = {
    "unknown profile": (mutate(lambda d: d["jobs"][1].update(profile="nope")),
                        None, ["job 'b'", "unknown profile 'nope'"]),
    "negative time": (mutate(lambda d: d["jobs"][0].update(submit_s=-1)),
                      None, ["job 'a'", "field submit_s", "greater than or equal to 0"]),
    "unknown key": (mutate(lambda d: d["jobs"][0].update(colour="red")),
                    None, ["job 'a'", "field colour", "unknown key"]),
    "too many cores": (mutate(lambda d: d["jobs"][0].update(cores=8)),
                       profile("p", speedup={"1": 1.0, "8": 4.0}),
                       ["job 'a'", "8 cores", "largest worker has 4"]),
    "empty loss curve": (good(), {**profile("p"), "loss": []},
                         ["p.json", "field loss"]),
    "bad format": (mutate(lambda d: d.update(format="v0")), None, ["field format"]),
    "nan in loss": (good(), {**profile("p"), "loss": [1.0, float("nan")]}, ["field loss"]),
    "duplicate job": (mutate(lambda d: d["jobs"].append(dict(d["jobs"][0]))), None,
                      ["job 'a' appears twice"]),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_workloads_name_file_job_and_field(tmp_path, case):
    data, prof, expected = CASES[case]
    path = write(tmp_path, data, prof)
    with pytest.raises(WorkloadError) as info:
        load_workload(path)
    msg = str(info.value)
    assert "\n" not in msg
    assert str(tmp_path) in msg
    for part in expected:
        assert part in msg, msg


def test_unreadable_and_malformed_files(tmp_path):
    with pytest.raises(WorkloadError, match="cannot read"):
        load_workload(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{ not json")
    with pytest.raises(WorkloadError, match="not valid JSON"):
        load_workload(bad)
