#!/usr/bin/env bash
# The vLLM GPU check: one command for a lent GPU machine (or any GPU host; inside NVIDIA's Triton
# vLLM container too) whose Python packages are unknown and which may have no internet.
#
#   tools/gpu/vllm_check.sh [--out DIR] [--budget SECONDS] [--steps LIST] [--bundle DIR]
#                           [--python PY] [--concurrency LIST] [--dry-run]
#
# Steps, in order (each skipped with its reason when what it needs is missing, each capped by
# what is left of the budget, so the whole run ends inside it and stops cleanly):
#   env         nvidia-smi, the Python, which packages import (torch+CUDA, transformers, vllm, ...);
#               always run: the other steps decide from it
#   checkpoint  model_repository/llm/1/hf, or a stand-in with random weights built from the
#               bundle's config and tokenizer files (timings hold, parity does not)
#   parity      the export's vLLM parity gate on CUDA, bf16 (tools/gpu/vllm_gpu_steps.py parity)
#   bench       python -m tools.bench.llm --targets vllm-server at --concurrency (16,64,256)
#   calibrate   python -m tools.simulate llm calibrate --engine vllm (skipped until it exists)
# Results go to --out (default $OUT, else build/vllm-gpu-check): check.log, summary.txt,
# env.json, parity.json, bench/bench-llm.{json,md,png}, calibration.json. Exit status: 0 when
# every step that ran passed (skipped steps are listed in summary.txt), 1 when one failed, 2 on
# a usage error. docker/README.md ("The vLLM GPU path") says how to prepare and run it.
set -uo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
ALL_STEPS="env,checkpoint,parity,bench,calibrate"
OUT_DIR=${OUT:-$ROOT/build/vllm-gpu-check}
BUDGET_S=420
STEPS=$ALL_STEPS
BUNDLE=$ROOT/build/vllm-gpu-bundle
PYTHON=python3
CONCURRENCY=16,64,256
DRY_RUN=0
# Seconds each step may take at most (less when the budget has less left); a step starts only
# with its minimum left. The bench: vLLM's server start (compile, CUDA graphs) + 3 levels of
# 5 s warm-up + 20 s + at most 10 s of drain.
declare -A CAP_S=([env]=60 [checkpoint]=90 [parity]=150 [bench]=210 [calibrate]=90)
declare -A MIN_S=([env]=5 [checkpoint]=20 [parity]=60 [bench]=120 [calibrate]=45)

usage() {
    awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "${BASH_SOURCE[0]}"
    cat <<EOF

Options:
  --out DIR          results folder (default: \$OUT, else build/vllm-gpu-check)
  --budget SECONDS   wall time for the whole run (default $BUDGET_S; a device command may run 600)
  --steps LIST       comma-separated, of $ALL_STEPS (default: all)
  --bundle DIR       carried files: hf-meta/ (config and tokenizer files), wheels/ (*.whl installed
                     offline) (default: build/vllm-gpu-bundle, made by \`make vllm-gpu-bundle\`)
  --python PY        the interpreter (default python3; it needs torch, vllm for the vLLM steps)
  --concurrency LIST the bench's closed-loop streams (default $CONCURRENCY)
  --dry-run          print the plan and exit
  -h, --help         this help
EOF
}

fail_usage() {
    echo "vllm_check.sh: $1" >&2
    echo "try: tools/gpu/vllm_check.sh --help" >&2
    exit 2
}

# value OPTION WHAT "$@": the option's value (refused when absent or another option)
value() {
    [[ $# -ge 4 && $4 != -* ]] || fail_usage "$1 needs $2"
}
while (($#)); do
    case $1 in
        --out) value "$1" "a folder" "$@"; OUT_DIR=$2; shift 2 ;;
        --budget) value "$1" "whole seconds" "$@"; [[ $2 =~ ^[0-9]+$ ]] || fail_usage "--budget needs whole seconds"; BUDGET_S=$2; shift 2 ;;
        --steps) value "$1" "a list" "$@"; STEPS=$2; shift 2 ;;
        --bundle) value "$1" "a folder" "$@"; BUNDLE=$2; shift 2 ;;
        --python) value "$1" "an interpreter" "$@"; PYTHON=$2; shift 2 ;;
        --concurrency)
            value "$1" "numbers like 16,64,256" "$@"
            [[ $2 =~ ^[0-9]+(,[0-9]+)*$ ]] || fail_usage "--concurrency needs numbers like 16,64,256"
            CONCURRENCY=$2; shift 2 ;;
        --dry-run) DRY_RUN=1; shift ;;
        -h | --help) usage; exit 0 ;;
        *) fail_usage "unknown argument: $1" ;;
    esac
done
IFS=, read -r -a SELECTED <<<"$STEPS"
for step in "${SELECTED[@]}"; do
    [[ ,$ALL_STEPS, == *,$step,* ]] || fail_usage "unknown step '$step' (choose from $ALL_STEPS)"
done
((BUDGET_S >= 30)) || fail_usage "--budget below 30 s leaves no step room to run"

CHECKPOINT=$ROOT/model_repository/llm/1/hf
WORK=$ROOT/build/vllm-gpu-check-work  # scratch that does not come back (knobs, installed wheels)
KNOBS=$WORK/vllm-gpu.pbtxt
BENCH_ARGS=(--targets vllm-server --concurrency "$CONCURRENCY" --rates "" --seconds 20 --warmup 5 --drain 10 --slo "ttft=1,tpot=0.1")

selected() { [[ ,$STEPS, == *,$1,* ]]; }

if ((DRY_RUN)); then
    echo "plan: budget ${BUDGET_S} s, results in $OUT_DIR, python $PYTHON, bundle $BUNDLE"
    for step in env checkpoint parity bench calibrate; do
        if selected "$step"; then
            echo "  $step: at most ${CAP_S[$step]} s (starts only with ${MIN_S[$step]} s left)"
        else
            echo "  $step: not selected"
        fi
    done
    shown=()
    for argument in "${BENCH_ARGS[@]}"; do shown+=("${argument:-''}"); done
    echo "  bench: python -m tools.bench.llm ${shown[*]} --vllm-config $KNOBS --tokenizer $CHECKPOINT/tokenizer.json"
    exit 0
fi

mkdir -p "$OUT_DIR" "$WORK" || exit 1
LOG=$OUT_DIR/check.log
SUMMARY=$OUT_DIR/summary.txt
: >"$SUMMARY"
exec > >(tee -a "$LOG") 2>&1
export PYTHONUNBUFFERED=1 PYTHONPATH=$ROOT${PYTHONPATH:+:$PYTHONPATH}
cd "$ROOT" || exit 1
START=$SECONDS
DEADLINE=$((START + BUDGET_S))
FAILED=0
CHILD=""

say() { printf '%(%H:%M:%S)T [%4ds] %s\n' -1 "$((SECONDS - START))" "$*"; }
record() {  # step status seconds note
    printf '%-10s %-8s %4ss  %s\n' "$1" "$2" "$3" "$4" >>"$SUMMARY"
    say "$1: $2 ($3 s) $4"
    [[ $2 == failed ]] && FAILED=1
    return 0
}
# shellcheck disable=SC2317  # called by the trap below
on_signal() {
    say "stopping on a signal: ending the running step"
    [[ -n $CHILD ]] && kill -INT "$CHILD" 2>/dev/null && wait "$CHILD" 2>/dev/null
    record interrupted failed 0 "stopped by a signal"
    exit 1
}
trap on_signal INT TERM

# run_step NAME NOTE COMMAND...: runs COMMAND under the step's cap (SIGINT first, so Python's
# cleanup stops the servers it started, then SIGKILL 20 s later) and records the outcome.
run_step() {
    local name=$1 note=$2 left cap began status
    shift 2
    left=$((DEADLINE - SECONDS))
    if ((left < MIN_S[$name])); then
        record "$name" skipped 0 "only ${left} s of the budget left (needs ${MIN_S[$name]} s)"
        return 1
    fi
    cap=$((left < CAP_S[$name] ? left : CAP_S[$name]))
    say "== $name (at most $cap s): $*"
    began=$SECONDS
    timeout --signal=INT --kill-after=20 "$cap" "$@" &
    CHILD=$!
    wait "$CHILD"
    status=$?
    CHILD=""
    if ((status == 0)); then
        record "$name" ok "$((SECONDS - began))" "$note"
    elif ((status == 124 || status == 137)); then
        record "$name" failed "$((SECONDS - began))" "stopped at its ${cap} s cap"
    else
        record "$name" failed "$((SECONDS - began))" "exit status $status (its output is above)"
    fi
    return "$status"
}

has() { [[ -n ${PACKAGES[$1]:-} ]]; }

# --- env -----------------------------------------------------------------------------------
declare -A PACKAGES=()
CUDA=0
say "vLLM GPU check in $ROOT (git $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo '?')), budget ${BUDGET_S} s, results in $OUT_DIR"
if [[ -d $BUNDLE/wheels ]] && compgen -G "$BUNDLE/wheels/*.whl" >/dev/null; then
    say "installing the bundle's wheels offline into $WORK/site"
    if "$PYTHON" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$WORK/site" "$BUNDLE"/wheels/*.whl; then
        export PYTHONPATH=$PYTHONPATH:$WORK/site
    else
        say "WARNING: the wheels did not install; the steps that need them will skip"
    fi
fi
# Always checked: every later step decides from it whether it can run.
if command -v nvidia-smi >/dev/null; then
    nvidia-smi --query-gpu=name,memory.total,memory.used,driver_version --format=csv,noheader || say "nvidia-smi failed"
else
    say "nvidia-smi is not installed: no NVIDIA driver on this host"
fi
if ! command -v "$PYTHON" >/dev/null; then
    record env failed 0 "no interpreter $PYTHON"
elif run_step env "python and packages in env.json" "$PYTHON" tools/gpu/vllm_gpu_steps.py env --out "$OUT_DIR/env.json"; then
    while read -r name version; do
        PACKAGES[$name]=$version
    done < <("$PYTHON" -c 'import json, sys; e = json.load(open(sys.argv[1])); [print(k, v) for k, v in e["packages"].items() if v]; [print("cuda", "yes") for _ in [0] if e.get("cuda_available")]' "$OUT_DIR/env.json")
    [[ ${PACKAGES[cuda]:-} == yes ]] && CUDA=1
    say "imports: $(for k in "${!PACKAGES[@]}"; do printf '%s=%s ' "$k" "${PACKAGES[$k]}"; done)"
fi
((CUDA)) || say "torch sees no CUDA GPU here: the vLLM steps skip"
has vllm || say "vllm does not import with $PYTHON: parity, bench and calibrate skip (run inside nvcr.io/nvidia/tritonserver:<yy.mm>-vllm-python-py3, or install vllm)"
has tritonclient || say "tritonclient does not import: knobs, parity, bench and calibrate skip (carry its wheels: make vllm-gpu-bundle)"

# --- checkpoint ----------------------------------------------------------------------------
STAND_IN=0
if selected checkpoint || selected parity || selected bench || selected calibrate; then
    if [[ -f $CHECKPOINT/model.safetensors && -f $CHECKPOINT/config.json ]]; then
        [[ -f $CHECKPOINT/STAND-IN.txt ]] && STAND_IN=1
        record checkpoint ok 0 "$CHECKPOINT$( ((STAND_IN)) && echo ' (a stand-in from an earlier run)')"
    elif ! ((CUDA)) || ! has vllm; then
        record checkpoint skipped 0 "none at $CHECKPOINT, and no step here could use one (no CUDA or no vllm)"
    else
        META=$BUNDLE/hf-meta
        [[ -f $META/config.json ]] || META=$CHECKPOINT
        if ! [[ -f $META/config.json && -f $META/tokenizer.json ]]; then
            record checkpoint failed 0 "no checkpoint at $CHECKPOINT and no config/tokenizer files to build a stand-in (make vllm-gpu-bundle)"
        elif ! has torch || ! has transformers; then
            record checkpoint skipped 0 "a stand-in needs torch and transformers"
        elif run_step checkpoint "stand-in: random weights, timings only" "$PYTHON" tools/gpu/vllm_gpu_steps.py stand-in --meta "$META" --out "$CHECKPOINT"; then
            STAND_IN=1
        fi
    fi
fi
HAVE_CHECKPOINT=0
[[ -f $CHECKPOINT/model.safetensors ]] && HAVE_CHECKPOINT=1
if has tritonclient; then
    "$PYTHON" tools/gpu/vllm_gpu_steps.py knobs --out "$KNOBS" || say "WARNING: the GPU knobs could not be written"
fi

# needs STEP: 0 when the step can run, else records why not
needs() {
    local step=$1 missing=()
    ((CUDA)) || missing+=("a CUDA GPU")
    has vllm || missing+=("vllm")
    has tritonclient || missing+=("tritonclient")
    ((HAVE_CHECKPOINT)) || missing+=("the checkpoint")
    [[ -f $KNOBS ]] || missing+=("the GPU knobs")
    if ((${#missing[@]})); then
        local joined
        joined=$(printf ', %s' "${missing[@]}")
        record "$step" skipped 0 "needs ${joined:2}"
        return 1
    fi
}

# --- parity --------------------------------------------------------------------------------
if selected parity && needs parity; then
    note="vLLM vs transformers, bf16 on CUDA: parity.json"
    ((STAND_IN)) && note="stand-in weights: agreement in parity.json is not the export's gate"
    run_step parity "$note" "$PYTHON" tools/gpu/vllm_gpu_steps.py parity --checkpoint "$CHECKPOINT" --out "$OUT_DIR/parity.json"
fi

# --- bench ---------------------------------------------------------------------------------
if selected bench && needs bench; then
    has aiohttp || say "WARNING: aiohttp does not import; the bench's OpenAI client needs it"
    run_step bench "bench/bench-llm.md" "$PYTHON" -m tools.bench.llm "${BENCH_ARGS[@]}" \
        --vllm-python "$(command -v "$PYTHON")" --vllm-config "$KNOBS" --tokenizer "$CHECKPOINT/tokenizer.json" --out "$OUT_DIR/bench"
fi

# --- calibrate -----------------------------------------------------------------------------
if selected calibrate && needs calibrate; then
    HELP=$("$PYTHON" -m tools.simulate llm calibrate --help 2>&1) || HELP=""
    if [[ $HELP != *--engine* ]]; then
        record calibrate skipped 0 "python -m tools.simulate llm calibrate has no --engine option yet"
    elif [[ $HELP != *--vllm-python* && ! -x $ROOT/.venv-vllm/bin/python ]]; then
        record calibrate skipped 0 "calibrate --engine vllm runs only in .venv-vllm, absent here, and has no --vllm-python option"
    else
        ARGS=(--engine vllm --checkpoint "$CHECKPOINT" --quick --out "$OUT_DIR/calibration.json")
        [[ $HELP == *--config* ]] && ARGS+=(--config "$KNOBS")
        [[ $HELP == *--vllm-python* ]] && ARGS+=(--vllm-python "$(command -v "$PYTHON")")
        run_step calibrate "calibration.json" "$PYTHON" -m tools.simulate llm calibrate "${ARGS[@]}"
    fi
fi

say "done in $((SECONDS - START)) s; summary ($SUMMARY):"
cat "$SUMMARY"
exit "$FAILED"
