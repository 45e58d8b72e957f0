"""The suite's xdist scheduler order (tests/xdist_modules.py): folders in the suite's order (e2e
and slurm alternately), the longest module of a folder first, an unmeasured one at the default,
ties in the suite's order."""

from __future__ import annotations

from pathlib import Path

from tests.xdist_modules import DEFAULT_S, dispatch_order, module_of, seconds_from_junit


def test_units_go_by_folder_then_longest_first() -> None:
    modules = ["tests/unit/test_a.py", "tests/unit/test_b.py", "tests/integration/test_c.py",
               "tests/integration/test_d.py", "tests/integration/test_new.py",
               "tests/e2e/test_e.py", "tests/e2e/test_f.py", "tests/slurm/test_g.py"]
    seconds = {"tests/unit/test_b.py": 9, "tests/integration/test_c.py": 5,
               "tests/integration/test_d.py": 300, "tests/e2e/test_e.py": 100,
               "tests/e2e/test_f.py": 100, "tests/slurm/test_g.py": 999}
    assert 5 < DEFAULT_S < 300
    assert dispatch_order(modules, seconds) == [
        "tests/unit/test_a.py", "tests/unit/test_b.py",  # a: unmeasured, DEFAULT_S > 9
        "tests/integration/test_d.py", "tests/integration/test_new.py", "tests/integration/test_c.py",
        "tests/e2e/test_e.py", "tests/slurm/test_g.py",  # e2e and slurm alternately
        "tests/e2e/test_f.py"]  # a tie with test_e: the suite's order


def test_e2e_and_slurm_modules_alternate_each_longest_first() -> None:
    modules = ["tests/integration/test_i.py", "tests/e2e/test_a.py", "tests/e2e/test_b.py",
               "tests/e2e/test_c.py", "tests/slurm/test_x.py", "tests/slurm/test_y.py",
               "tests/other/test_z.py"]
    seconds = {"tests/e2e/test_a.py": 10, "tests/e2e/test_b.py": 30, "tests/e2e/test_c.py": 20,
               "tests/slurm/test_x.py": 5, "tests/slurm/test_y.py": 50}
    assert dispatch_order(modules, seconds) == [
        "tests/integration/test_i.py",
        "tests/e2e/test_b.py", "tests/slurm/test_y.py", "tests/e2e/test_c.py",
        "tests/slurm/test_x.py", "tests/e2e/test_a.py",
        "tests/other/test_z.py"]  # a folder outside the order: last


def test_a_module_is_its_file_and_seconds_come_from_a_junit_report(tmp_path: Path) -> None:
    assert module_of("tests/e2e/test_x.py::TestK::test_y[a::b]") == "tests/e2e/test_x.py"
    report = tmp_path / "r.xml"
    report.write_text('<testsuites><testsuite>'
                      '<testcase classname="tests.e2e.test_x" name="a" time="10.4"/>'
                      '<testcase classname="tests.e2e.test_x.TestK" name="b" time="2.3"/>'
                      '<testcase classname="tests.unit.test_y" name="c" time="0.1"/>'
                      '</testsuite></testsuites>')
    assert seconds_from_junit(report) == {"tests/e2e/test_x.py": 13}
