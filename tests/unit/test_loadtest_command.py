"""The locust command `python -m loadtest.run` builds (no locust is started)."""

from __future__ import annotations

from loadtest.run import RunSettings, build_parser, locust_command


def command_for(*argv: str, tmp_path) -> list[str]:
    args = build_parser().parse_args(["--report-dir", str(tmp_path), *argv])
    return locust_command(RunSettings.from_cli_args(args), tmp_path / "locust", tmp_path / "report.html")


def value_after(command: list[str], flag: str) -> str:
    return command[command.index(flag) + 1]


def test_worker_processes_get_a_master_on_a_free_loopback_port_of_their_own(tmp_path) -> None:
    first = command_for("--", "--processes", "2", tmp_path=tmp_path)
    second = command_for("--", "--processes", "2", tmp_path=tmp_path)
    for command in (first, second):
        assert value_after(command, "--master-bind-host") == "127.0.0.1"
        assert value_after(command, "--master-bind-port") == value_after(command, "--master-port") != "5557"
        assert int(value_after(command, "--expect-workers-max-wait")) > 0
    assert value_after(first, "--master-port") != value_after(second, "--master-port")


def test_a_run_without_worker_processes_has_no_master_options(tmp_path) -> None:
    command = command_for(tmp_path=tmp_path)
    assert not any(arg.startswith("--master") for arg in command)


def test_the_llm_workload_runs_the_llm_locustfile_with_only_the_streaming_user(tmp_path) -> None:
    command = command_for("--workload", "llm", "--llm-max-tokens", "16", tmp_path=tmp_path)
    assert value_after(command, "-f") == "loadtest/llm/locustfile.py"
    assert command[-1] == "LlmStreamUser" and not any(arg.endswith(("HttpUser", "GrpcUser")) for arg in command)
    assert value_after(command, "--llm-max-tokens") == "16"


def test_the_embed_workload_stays_the_default(tmp_path) -> None:
    command = command_for(tmp_path=tmp_path)
    assert value_after(command, "-f") == "loadtest/locustfile.py" and "LlmStreamUser" not in command


def test_the_load_options_reach_locust_and_a_class_of_weight_zero_has_no_users(tmp_path) -> None:
    command = command_for("--model", "encoder", "--bulk-weight", "0", "--protocol", "grpc", tmp_path=tmp_path)
    assert value_after(command, "--model") == "encoder" and value_after(command, "--bulk-weight") == "0"
    assert command[-1:] == ["InteractiveGrpcUser"]
