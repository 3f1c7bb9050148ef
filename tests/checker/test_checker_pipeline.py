"""Loading run dirs, verdict.json, report.html and `mqlab chaos check` exit codes."""

import json
import shutil

import pytest
from checker.builders import Run
from typer.testing import CliRunner

from chaos import cli as chaos_cli
from chaos.checker import session as spark_session
from chaos.checker.checks import CHECKS
from chaos.checker.loader import load_history
from chaos.checker.schemas import DELIVERIES

runner = CliRunner()


@pytest.mark.parametrize("name", list(CHECKS))
def test_every_check_is_valid_on_the_clean_history(clean_output, name):
    check = clean_output.verdict.checks[name]
    assert check.valid is True, (check.reason, check.error, check.examples)


def test_verdict_json(clean_output, clean_run_dir):
    data = json.loads((clean_run_dir / "verdict.json").read_text())
    assert data["valid"] is True and (data["suite"], data["seed"]) == ("unit", 7)
    assert list(data["checks"]) == list(CHECKS)
    for check in data["checks"].values():
        assert {"valid", "definition", "counts", "examples"} <= set(check)
    assert data["inputs"]["rows"]["deliveries"] == 20
    assert data["timers_ms"]["L_b"] == 600 and data["timer_sources"]["L_b"] == "timing.json:broker_lock_lease_ms"
    assert clean_output.verdict.exit_code == 0


def test_report_is_self_contained_and_names_every_check(clean_output):
    html = clean_output.report_path.read_text()
    assert html.count("data:image/png;base64,") >= 4
    for name in CHECKS:
        assert f'id="check-{name}"' in html
    assert "src=\"http" not in html and "<script" not in html


def _small_run():
    return Run().sends_for(0, 3).consume(0, range(3), t0=200, orderly=False)


def test_loader_reads_jsonl_and_parquet_and_skips_torn_lines(spark, tmp_path):
    run_dir = _small_run().deliver("q0-m0", 300, offset=0, client="c2").write(tmp_path / "run")
    # consumer-1 wrote Parquet instead of JSONL; consumer-2 was killed mid-line, and one line lacks its node
    jsonl = run_dir / "consumer-1" / "deliveries.jsonl"
    spark.read.schema(DELIVERIES).json(str(jsonl)).write.parquet(str(run_dir / "consumer-1" / "deliveries.parquet"))
    jsonl.unlink()
    with (run_dir / "consumer-2" / "deliveries.jsonl").open("a") as f:
        f.write(json.dumps({"event": "deliver", "mono_ms": 310, "msg_id": "q0-m1", "group": "G",
                            "result": "CONSUME_SUCCESS"}) + "\n")
        f.write('{"node": "consumer-2", "mono_ms": 320, "msg_id": "q0-')
    h = load_history(spark, run_dir)
    assert h.stats["rows"]["deliveries"] == 5 and h.stats["unreadable_lines"]["deliveries"] == 1
    nodes = {r["node"] for r in h.deliveries.filter("event is not null").select("node").collect()}
    assert nodes == {"consumer-1", "consumer-2"}
    # the processes file is there, empty, as the chaos runner always writes it
    assert h.present == {"sends": 1, "deliveries": 2, "events": 0, "nemesis": 0, "processes": 1, "readback": 0,
                         "requests": 0}


def test_cli_valid_run_exits_0(monkeypatch, clean_output, clean_run_dir):
    from chaos.checker import pipeline

    # the clean run was checked once already (clean_output); the CLI only maps it to an exit code
    monkeypatch.setattr(pipeline, "check_run", lambda *a, **k: clean_output)
    result = runner.invoke(chaos_cli.app, ["check", str(clean_run_dir)])
    assert result.exit_code == 0, result.output
    assert "overall: valid" in result.output and "report:" in result.output


@pytest.mark.slow
def test_cli_invalid_run_exits_1(tmp_path):
    run_dir = Run().sends_for(0, 3).consume(0, [0, 2], t0=200, orderly=False).write(tmp_path / "run")
    result = runner.invoke(chaos_cli.app, ["check", str(run_dir), "--no-report", "--out", str(tmp_path / "out")])
    assert result.exit_code == 1, result.output
    assert "INVALID" in result.output
    verdict = json.loads((tmp_path / "out" / "verdict.json").read_text())
    assert verdict["valid"] is False and verdict["checks"]["lost"]["counts"]["lost"] == 1
    assert not (tmp_path / "out" / "report.html").exists()


@pytest.mark.slow
def test_cli_missing_histories_exit_2_with_reasons(tmp_path):
    run_dir = Run().sends_for(0, 3).write(tmp_path / "run")
    result = runner.invoke(chaos_cli.app, ["check", str(run_dir), "--no-report"])
    assert result.exit_code == 2, result.output
    checks = json.loads((run_dir / "verdict.json").read_text())["checks"]
    assert checks["lost"]["valid"] == "unknown" and "deliveries" in checks["lost"]["reason"]
    # what needs the missing histories cannot say; the processes file shows no death and no disk was filled
    assert all(c["valid"] == "unknown" for name, c in checks.items() if name not in ("deaths", "disk-full"))
    assert checks["deaths"]["valid"] is True and checks["disk-full"]["valid"] is True


def test_cli_not_a_run_dir_exits_2(tmp_path):
    result = runner.invoke(chaos_cli.app, ["check", str(tmp_path / "nope")])
    assert result.exit_code == 2 and "not a directory" in result.output


def test_missing_java_says_how_to_install_it(monkeypatch, tmp_path):
    monkeypatch.setattr(spark_session, "java_executable", lambda: None)
    with pytest.raises(spark_session.SparkUnavailable, match="apt-get install -y openjdk-17-jre-headless"):
        spark_session.make_spark()
    monkeypatch.setattr("pyspark.sql.SparkSession.getActiveSession", classmethod(lambda cls: None))
    run_dir = Run().sends_for(0, 1).write(tmp_path / "run")
    result = runner.invoke(chaos_cli.app, ["check", str(run_dir)])
    assert result.exit_code == 2
    assert "apt-get install -y openjdk-17-jre-headless" in result.output


def test_mqlab_has_the_chaos_check_command():
    from harness.cli import app

    result = runner.invoke(app, ["chaos", "check", "--help"])
    assert result.exit_code == 0 and "--spark-master" in result.output


def test_run_dir_is_left_as_found_apart_from_outputs(clean_run_dir, tmp_path):
    copy = shutil.copytree(clean_run_dir, tmp_path / "copy")
    assert sorted(p.name for p in copy.iterdir()) == sorted(p.name for p in clean_run_dir.iterdir())
