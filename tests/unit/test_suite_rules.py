"""The suite's own rules (tests/suite_rules.py), on small suites run by pytester: the unit tests
run first, and in CI a test skipped for want of torch fails."""

from __future__ import annotations

import sys

import pytest

pytest_plugins = ["pytester"]

CONFTEST = "from tests.suite_rules import *  # noqa: F403\n"


def test_unit_then_integration_then_e2e_then_slurm(pytester: pytest.Pytester) -> None:
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

