"""The suite's own rules (tests/suite_rules.py), on small suites run by pytester: the unit tests
run first, and in CI a test skipped for want of torch fails."""

from __future__ import annotations

import sys

import pytest

pytest_plugins = ["pytester"]

CONFTEST = "from tests.suite_rules import *  # noqa: F403\n"


def test_unit_then_integration_then_e2e_then_slurm(pytester: pytest.Pytester,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)  # as one process runs it
    pytester.makeconftest(CONFTEST)
    for folder, name in (("e2e", "test_c"), ("integration", "test_b"), ("slurm", "test_d"),
                         ("unit", "test_a"), ("other", "test_e")):
        (pytester.path / "tests" / folder).mkdir(parents=True)
        (pytester.path / "tests" / folder / f"{name}.py").write_text(
            "def test_1():\n    pass\n\ndef test_2():\n    pass\n")
    reprec = pytester.inline_run("-p", "no:cacheprovider", "tests")
    ran = [r.nodeid for r in reprec.getreports("pytest_runtest_logreport") if r.when == "call"]
    assert ran == [f"tests/{folder}/{name}.py::test_{i}" for folder, name in
                   (("unit", "test_a"), ("integration", "test_b"), ("e2e", "test_c"),
                    ("slurm", "test_d"), ("other", "test_e")) for i in (1, 2)]


TORCH_TESTS = """\
import sys
import pytest

def test_torch(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)  # as on a machine without torch
    pytest.importorskip("torch")

def test_postgres():
    pytest.skip("no PostgreSQL here")
"""


@pytest.mark.parametrize("ci", [True, False])
def test_a_test_skipped_for_want_of_torch_fails_in_ci_only(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, ci: bool) -> None:
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_torchless=TORCH_TESTS)
    if ci:
        monkeypatch.setenv("CI", "true")
    else:
        monkeypatch.delenv("CI", raising=False)
    reprec = pytester.inline_run("-p", "no:cacheprovider")
    if ci:  # the other skip stays a skip
        reprec.assertoutcome(failed=1, skipped=1)
        (failed,) = reprec.getfailures()
        assert "torch" in str(failed.longrepr) and "broken environment" in str(failed.longrepr)
    else:
        reprec.assertoutcome(skipped=2)


@pytest.mark.parametrize("ci", [True, False])
def test_a_module_skipping_itself_for_want_of_torch_is_an_error_in_ci(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, ci: bool) -> None:
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_torchmod="import sys\nimport pytest\n\nsys.modules['torch'] = None\n"
                        "pytest.importorskip('torch')\n\ndef test_x():\n    pass\n")
    monkeypatch.setitem(sys.modules, "torch", sys.modules.get("torch"))  # undone after the test
    if ci:
        monkeypatch.setenv("CI", "1")
    else:
        monkeypatch.delenv("CI", raising=False)
    result = pytester.runpytest("-p", "no:cacheprovider")
    if ci:
        assert result.ret == pytest.ExitCode.INTERRUPTED
        result.stdout.fnmatch_lines(["*a torch test would be skipped in CI*", "*1 error*"])
    else:
        assert result.ret == pytest.ExitCode.NO_TESTS_COLLECTED
        result.stdout.fnmatch_lines(["*1 skipped*"])


SERVICE_TESTS = {
    "unit/test_a.py": "def test_1():\n    pass\n",
    "integration/conftest.py": "import pytest\n\n@pytest.fixture\ndef rucio_env():\n    return 1\n\n"
                               "@pytest.fixture\ndef slurm_env():\n    return 1\n",
    "integration/test_b.py": "def test_plain():\n    pass\n\ndef test_rucio(rucio_env):\n    pass\n\n"
                             "def test_slurm(slurm_env):\n    pass\n",
    "slurm/test_c.py": "def test_1():\n    pass\n",
}


@pytest.mark.parametrize("worker", [True, False])
def test_under_xdist_a_service_s_tests_are_one_group_and_slurm_goes_first(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, worker: bool) -> None:
    pytester.makeconftest(CONFTEST)
    for name, text in SERVICE_TESTS.items():
        (pytester.path / "tests" / name).parent.mkdir(parents=True, exist_ok=True)
        (pytester.path / "tests" / name).write_text(text)
    if worker:
        monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw0")
    else:
        monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
    reprec = pytester.inline_run("-p", "no:cacheprovider", "--collect-only", "tests")
    items = reprec.getcall("pytest_collection_finish").session.items  # after the rules' sorting
    groups = {item.nodeid: [m.args[0] for m in item.iter_markers("xdist_group")] for item in items}
    order = [item.nodeid for item in items]
    if not worker:  # one process: the folder order, no groups
        assert order == ["tests/unit/test_a.py::test_1", "tests/integration/test_b.py::test_plain",
                         "tests/integration/test_b.py::test_rucio",
                         "tests/integration/test_b.py::test_slurm", "tests/slurm/test_c.py::test_1"]
        assert all(g == [] for g in groups.values())
        return
    assert order == ["tests/integration/test_b.py::test_slurm", "tests/slurm/test_c.py::test_1",
                     "tests/unit/test_a.py::test_1", "tests/integration/test_b.py::test_plain",
                     "tests/integration/test_b.py::test_rucio"]
    assert groups == {"tests/integration/test_b.py::test_slurm": ["slurm"],
                      "tests/slurm/test_c.py::test_1": ["slurm"],
                      "tests/unit/test_a.py::test_1": ["tests/unit/test_a.py"],
                      "tests/integration/test_b.py::test_plain": ["tests/integration/test_b.py"],
                      "tests/integration/test_b.py::test_rucio": ["rucio"]}
