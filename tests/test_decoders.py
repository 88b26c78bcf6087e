"""Decoders with a KV cache (issue 26): cached cases per past length, and generation parity.

Default: the pure step comparison (ties), bad declarations (exit 2, located), and one
tiny Llama with a planted defect that only shows from generation step 2 beside its
control (tests/data/decoders). `slow`: the whole decoder zoo (examples/zoo/decoders.yml)
against its baseline.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from parity_gate.cli import main
from parity_gate.compare.generation import Setup, compare_step, judge, rule_step
from parity_gate.model.comparison import Tolerance

pytest.importorskip("transformers")

DATA = Path(__file__).resolve().parent / "data" / "decoders"
ZOO = Path(__file__).resolve().parent.parent / "examples" / "zoo"
TOL = Tolerance(atol=1e-5, rtol=1e-3)


@pytest.fixture(autouse=True, scope="module")
def _offline(hf_offline: None) -> None:
    """Every test here runs with HF_HUB_OFFLINE=1 (conftest.hf_offline)."""


def run(manifest: Path, out: Path, *args: str) -> tuple[int, dict[str, Any]]:
    code = main(["run", str(manifest), "--out", str(out), "--quiet", "--no-cache", *args])
    return code, json.loads((out / "results.json").read_text())


# ------------------------------------------------------------------ pure comparison


def test_a_flip_on_a_tie_parts_the_sequences_legitimately() -> None:
    up = float(np.nextafter(np.float32(3.0), np.float32(4.0)))  # one float32 ulp above 3
    eager = np.array([[1.0, 3.0, up, 0.0]], dtype=np.float32)  # top two within rounding
    onnx = np.array([[1.0, up, 3.0, 0.0]], dtype=np.float32)
    step = compare_step(3, 7, eager, onnx, TOL, "float32")
    assert step.passed and not step.tokens_agree and step.tie
    gen = judge(Setup("p", 5, 4, TOL), [[1, 1, 2, 0]], [[1, 1, 1, 3]],
                [compare_step(1, 0, eager[:, [3, 0, 1, 2]], eager[:, [3, 0, 1, 2]], TOL,
                              "float32"),
                 compare_step(2, 5, eager[:, [3, 0, 1, 2]], eager[:, [3, 0, 1, 2]], TOL,
                              "float32"), step])
    assert gen.passed and gen.parted_after_tie and gen.first_divergent_step == 3
    assert gen.divergent_row == 0 and "tie" in gen.describe()


def test_a_real_flip_fails_at_its_step_even_within_tolerance() -> None:
    eager = np.array([[0.0, 2.0, 1.0]], dtype=np.float32)
    onnx = np.array([[0.0, 1.0, 2.0]], dtype=np.float32)
    wide = Tolerance(atol=5.0, rtol=0.0)  # the logits pass; the greedy token does not
    step = compare_step(2, 6, eager, onnx, wide, "float32")
    assert step.passed and not step.tokens_agree and not step.tie
    gen = judge(Setup("p", 6, 2, wide), [[1, 1]], [[1, 2]],
                [compare_step(1, 0, eager, eager, wide, "float32"), step])
    assert not gen.passed and gen.first_failing_step == 2
    assert "step 2 (past length 6: the token at position 6)" in gen.describe()


def test_a_failing_float16_step_stands_only_when_onnx_is_further_from_float64() -> None:
    rng = np.random.default_rng(0)
    truth = rng.normal(0, 8, (1, 32))
    tol = Tolerance(atol=1e-2, rtol=1e-2)
    noise = rng.normal(0, 0.3, truth.shape)
    eager = (truth + noise).astype(np.float16)  # eager's own error, about as large as ONNX's
    onnx = (truth - noise).astype(np.float16)
    step = compare_step(2, 6, eager, onnx, tol, "float16")
    assert not step.passed
    same = rule_step(step, eager, onnx, truth, tol)
    assert same.ruling == "as_eager" and same.excused and not same.failed
    worse = (truth + 20 * noise).astype(np.float16)  # ONNX far further off than eager
    bad = rule_step(compare_step(2, 6, eager, worse, tol, "float16"), eager, worse, truth, tol)
    assert bad.ruling == "onnx_worse" and bad.failed


# ------------------------------------------------------------------ declarations


def test_generation_without_a_cache_is_a_located_error(tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]
                                                       ) -> None:
    text = (DATA / "parity.yml").read_text().replace(
        "    cache: {past_lengths: [0, 3]}\n    generation: {steps: 4, prompt: prompt}\n"
        "    fixtures: [text]\n  - name: position_blind",
        "    generation: {steps: 4, prompt: promt}\n    fixtures: [text]\n"
        "  - name: position_blind", 1).replace("python_path: [.]", f"python_path: [{DATA}]")
    bad = tmp_path / "parity.yml"
    bad.write_text(text)
    assert main(["check", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "parity.yml:25:17: modules[0].generation: a generation check feeds" in err
    assert "modules[0].generation.prompt: unknown fixture set 'promt'" in err
    assert "did you mean `prompt`" in err


@pytest.mark.process
def test_declarations_the_model_refutes_exit_2_located(tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]
                                                       ) -> None:
    code, data = run(DATA / "bad.yml", tmp_path, "--jobs", "1")
    err = capsys.readouterr().err
    assert code == 2
    lines = [f["message"] for f in data["findings"] if f["kind"] == "declaration"]
    assert any(ln.startswith(f"{DATA / 'bad.yml'}:19:12: modules[0].cache: "
                             "BertForSequenceClassification") and "no KV cache" in ln
               for ln in lines), lines
    assert any("modules[0].generation: BertForSequenceClassification cannot generate" in ln
               for ln in lines), lines
    assert any(":28:31: modules[1].cache.past_lengths[1]: past length 70" in ln
               and "64 positions" in ln for ln in lines), lines
    assert all(c["outcome"] == "eager_error" for c in data["cases"])
    assert "modules[1].cache.past_lengths[1]" in err


# ------------------------------------------------------------------ planted defect


@pytest.fixture(scope="module")
def planted_out(tmp_path_factory: pytest.TempPathFactory) -> tuple[int, dict[str, Any], Path]:
    out = tmp_path_factory.mktemp("planted")
    code, data = run(DATA / "parity.yml", out, "--no-localise", "--jobs", "1")
    return code, data, out


@pytest.fixture(scope="module")
def planted(planted_out: tuple[int, dict[str, Any], Path]) -> tuple[int, dict[str, Any]]:
    return planted_out[0], planted_out[1]


def _case(data: dict[str, Any], case_id: str) -> dict[str, Any]:
    return next(c for c in data["cases"] if c["id"] == case_id)


@pytest.mark.process
def test_control_decoder_passes_with_every_present_output(
        planted: tuple[int, dict[str, Any]]) -> None:
    _, data = planted
    for past in (0, 3):
        case = _case(data, f"control/float32/text@past={past}/b1/cpu")
        assert case["outcome"] == "pass", case["reason"]
        names = [c["name"] for c in case["comparisons"]]
        assert names == ["logits"] + [f"present.{i}.{p}" for i in (0, 1)
                                      for p in ("key", "value")]
        # sample, batch, kv heads (GQA: 2 of 4), past + new tokens, head dim
        assert case["comparisons"][1]["shape_ref"] == f"(1, 1, 2, {past + 4}, 8)"
    gen = _case(data, "control/float32/prompt@generate=4/b1/cpu")
    assert gen["outcome"] == "pass", gen["reason"]
    g = gen["generation"]
    assert g["eager_tokens"] == g["onnx_tokens"] and len(g["eager_tokens"][0]) == 4
    assert [s["past_length"] for s in g["per_step"]] == [0, 5, 6, 7]


@pytest.mark.process
def test_position_ids_that_ignore_the_past_are_caught_at_step_2(
        planted: tuple[int, dict[str, Any]]) -> None:
    code, data = planted
    assert code == 1
    assert _case(data, "position_blind/float32/text@past=0/b1/cpu")["outcome"] == "pass"
    past = _case(data, "position_blind/float32/text@past=3/b1/cpu")
    assert past["outcome"] == "mismatch"
    gen = _case(data, "position_blind/float32/prompt@generate=4/b1/cpu")
    assert gen["outcome"] == "mismatch"
    g = gen["generation"]
    assert g["first_failing_step"] == 2 and g["per_step"][0]["passed"]  # the prefill is right
    assert not g["per_step"][1]["passed"]
    assert gen["reason"].startswith("generation fails at step 2 (past length 5: the token at "
                                    "position 5)"), gen["reason"]


@pytest.mark.process
def test_reports_show_each_generation_step(planted_out: tuple[int, dict[str, Any], Path]
                                           ) -> None:
    _, _, out = planted_out
    summary = (out / "summary.md").read_text()
    block = summary[summary.index("<b>Generation parity</b>: 1 of 2 cases do not pass"):]
    assert "| 2 | 5 |" in block and "| **no** |" in block  # step 2, past 5, out of tolerance
    assert "```mermaid\nxychart-beta" in block and "by step (float32)" in block
    page = (out / "report.html").read_text()
    assert '<section id="generation">' in page
    # (the page escapes `@` with a word joiner, so no id reads as a GitHub mention)
    assert "per-step error of position_blind/float32/prompt@\u2060generate=4/b1/cpu" in page


# ------------------------------------------------------------------ issue 38


@pytest.mark.process  # check imports the factories in a process of their own
def test_a_state_cache_is_refused_by_check_located(capsys: pytest.CaptureFixture[str]
                                                   ) -> None:
    """mamba keeps conv and recurrent states, no keys and values: `check` builds the model
    and refuses the declaration, located (it used to accept it, and `run` crashed)."""
    assert main(["check", str(ZOO / "state-cache.yml")]) == 2
    err = capsys.readouterr().err
    assert ("state-cache.yml:33:12: modules[0].cache: MambaForCausalLM keeps a state cache "
            "(LinearAttentionLayer in every layer)") in err, err


@pytest.mark.process
def test_sliding_windows_and_multi_query_pass(tmp_path: Path) -> None:
    """gemma2's sliding and global layers keep caches of different lengths, and the
    generation crosses the window; falcon's multi-query attention keeps one KV head. Both
    exports are correct: no false alarm (on main: ONNX Runtime errors, eager errors)."""
    code, data = run(DATA / "windows.yml", tmp_path, "--no-localise", "--jobs", "1")
    assert code == 0, [(c["id"], c["reason"]) for c in data["cases"] if c["outcome"] != "pass"]
    past = _case(data, "gemma2/float32/step@past=10/b1/cpu")
    shapes = {c["name"]: c["shape_ref"] for c in past["comparisons"]}
    # layer 0 slides (window 8: of its 7 past + 2 new tokens it keeps the last 7), layer 1
    # keeps all 10 + 2
    assert shapes["present.0.key"] == "(1, 1, 2, 7, 8)", shapes
    assert shapes["present.1.key"] == "(1, 1, 2, 12, 8)", shapes
    falcon = _case(data, "falcon/float32/step@past=10/b1/cpu")
    assert {c["name"]: c["shape_ref"] for c in falcon["comparisons"]}["present.0.key"] \
        == "(1, 1, 1, 12, 8)"  # one KV head
    gen = _case(data, "gemma2/float32/prompt@generate=10/b1/cpu")["generation"]
    assert len(gen["per_step"]) == 10 and gen["eager_tokens"] == gen["onnx_tokens"]
    # bloom checks the mask's length against past + new tokens (a dead equality in the
    # program): that is the gate's own `past_seq = past + seq`, not the model's hazard (on
    # main: an unchecked-size-assumption warning)
    assert not [f["message"] for f in data["findings"]
                if f["kind"] == "unchecked-size-assumption"], data["findings"]


@pytest.mark.process
def test_an_export_narrower_than_the_generation_is_a_hazard(
        defects: tuple[int, dict[str, Any], Path]) -> None:
    """rotary_narrow slices an 8-row table at the past length: torch.export narrows `past`
    to at most 8 while the generation (5 prompt tokens, 6 steps) reaches 9. The hazard
    names the bound, the line and the reach (on main: no word); the correct decoder and
    the defects that keep the range get none."""
    _, data, _ = defects
    narrowed = [f for f in data["findings"] if "narrowed" in f["message"]]
    assert [f["module"] for f in narrowed] == ["rotary_narrow"], narrowed
    message = narrowed[0]["message"]
    assert "torch.export narrowed 'past' (input 'past_0_key' dim 2) to at most 8 at " in message
    assert ("cache_defects.py:58, below 9, the past length the generation (5 prompt tokens, "
            "6 steps) reaches") in message, message
    assert narrowed[0]["hazard"]["rule"] == "dynamic-dim-specialised"


@pytest.fixture(scope="module")
def defects(tmp_path_factory: pytest.TempPathFactory) -> tuple[int, dict[str, Any], Path]:
    out = tmp_path_factory.mktemp("defects")
    # every failing case gets the expensive checks (value_order's cached case is worse
    # than its generation case, which the default cap of 3 would leave without a culprit)
    code, data = run(DATA / "defects.yml", out, "--jobs", "1", "--artifacts",
                     str(out / "artifacts"), "--localise-cases", "20")
    return code, data, out


@pytest.mark.process
def test_planted_cache_defects_name_step_tokens_culprit_owner_and_repro(
        defects: tuple[int, dict[str, Any], Path]) -> None:
    """Each planted defect fails generation at its step; the case names the tokens,
    the culprit line and its owner, and leaves a repro of that step that fails (on main:
    no localisation for a module with a cache). value_order (the past values concatenated
    in the wrong order) and state_offset (a position offset clamped at the export's length,
    wrong from step 5) are issue 38's second round of defects."""
    code, data, out = defects
    assert code == 1
    assert _case(data, "correct/float32/prompt@generate=6/b1/cpu")["outcome"] == "pass"
    for name, step, line in (("baked_prefill", 2, 42), ("export_mask", 2, 45),
                             ("value_order", 2, 52), ("state_offset", 5, 54)):
        case = _case(data, f"{name}/float32/prompt@generate=6/b1/cpu")
        assert case["outcome"] == "mismatch", case["reason"]
        assert case["reason"].startswith(f"generation fails at step {step}"), case["reason"]
        gen = case["generation"]
        assert gen["first_failing_step"] == step
        assert [s["passed"] for s in gen["per_step"][:step]] == [True] * (step - 1) + [False]
        # the tokens each side chose up to the failing step (the same: the logits failed)
        assert gen["eager_tokens"][0][:step] == gen["onnx_tokens"][0][:step]
        loc = case["localisation"]
        assert loc["culprit"]["source"] == f"cache_defects.py:{line}", loc["culprit"]
        assert loc["culprit"]["owner"] == "capture"
        repro = Path(loc["repro"])
        assert (repro / "repro.py").is_file()
        ran = subprocess.run([sys.executable, "repro.py"], cwd=repro, capture_output=True,
                             text=True, timeout=300)
        assert ran.returncode != 0, ran.stdout[-2000:]  # the step's repro fails
    summary = (out / "summary.md").read_text()
    # (markdown escapes the underscore)
    assert "| 2 | 0.001145 | cache\\_defects.py:42: aten.add.Tensor |" in summary
    assert "**culprit: model: aten.add.Tensor(%arange, 3) at cache\\_defects.py:42" in summary
    assert "| 5 | 5.61e-04 | cache\\_defects.py:54: aten.sum.dim\\_IntList |" in summary


@pytest.mark.process
def test_an_onnx_runtime_error_mid_generation_keeps_the_steps_before(
        defects: tuple[int, dict[str, Any], Path]) -> None:
    """The rotary table cut at 8 rows: ONNX Runtime raises at step 5 (position 8); steps
    1-4 were compared and match, and the summary counts the case (on main: only ORT's
    message, no step, no record)."""
    _, data, out = defects
    case = _case(data, "rotary_cut/float32/prompt@generate=6/b1/cpu")
    assert case["outcome"] == "runtime_error"
    gen = case["generation"]
    assert gen["error_step"] == 5 and gen["error_past_length"] == 8
    assert len(gen["per_step"]) == 4 and all(s["passed"] for s in gen["per_step"])
    assert case["reason"].startswith("ONNX Runtime raised at step 5 (past length 8): ")
    gens = [c for c in data["cases"] if "@generate=" in c["key"]["inputs"]]
    failing = sum(c["outcome"] != "pass" for c in gens)
    summary = (out / "summary.md").read_text()
    assert f"<b>Generation parity</b>: {failing} of {len(gens)} cases do not pass" in summary
    assert "| 5 (ONNX Runtime error) |" in summary


@pytest.mark.process
def test_an_onnx_runtime_error_mid_generation_is_localised(
        defects: tuple[int, dict[str, Any], Path]) -> None:
    """ONNX Runtime raises at step 5 of rotary_cut: the case names the node that raised, its
    op, the culprit line and its owner (the torch.export program raises on the same step's
    inputs: capture), and leaves that node alone as a repro that raises again (on main: no
    localisation for an error)."""
    _, data, out = defects
    case = _case(data, "rotary_cut/float32/prompt@generate=6/b1/cpu")
    loc = case["localisation"]
    assert loc is not None, case["reason"]
    culprit = loc["culprit"]
    assert culprit["aten"] == "aten.index_select.default", culprit
    assert culprit["source"] == "cache_defects.py:48" and culprit["owner"] == "capture"
    assert culprit["onnx_nodes"] == ["Gather"]
    layer = next(s for s in loc["steps"] if s["check"] == "layer")
    assert "ONNX Runtime raised at node node_index_select (Gather) at step 5" in layer["note"]
    folder = Path(loc["repro"])
    ran = subprocess.run([sys.executable, "repro.py"], cwd=folder, capture_output=True,
                         text=True, timeout=300)
    assert ran.returncode == 1, ran.stdout + ran.stderr
    assert "indices element out of data bounds" in ran.stdout
    summary = (out / "summary.md").read_text()
    row = next(line for line in summary.splitlines()  # the generation table's row
               if line.startswith("| `rotary_cut/float32/prompt@generate=6/b1/cpu` |")
               and "| 5 (ONNX Runtime error) |" in line)
    assert row.endswith("| cache\\_defects.py:48: aten.index\\_select.default |"), row


# ------------------------------------------------------------------ the decoder zoo


@pytest.mark.slow
@pytest.mark.process
def test_decoder_zoo_passes_its_baseline(tmp_path: Path) -> None:
    code, data = run(ZOO / "decoders.yml", tmp_path, "--jobs", "2", "--baseline",
                     str(ZOO / "decoders-baseline.yml"))
    modules = {c["key"]["module"] for c in data["cases"]}
    assert modules == {"gpt2", "llama", "qwen2", "mistral", "phi3", "t5", "t5_dynamo", "whisper"}
    gens = [c for c in data["cases"] if c["generation"] is not None]
    assert len(gens) == 7 * 2 * 1  # module x dtype x provider (cpu); t5_dynamo never exports
    assert all(len(c["generation"]["eager_tokens"][0]) == 16 for c in gens)
    failing = [c for c in data["cases"] if c["outcome"] not in ("pass", "skipped")]
    assert all(c["cause"] or c["reason"] for c in failing)
    assert data["gate"]["blocking"] == [], data["gate"]["blocking"]
    assert code == 0
