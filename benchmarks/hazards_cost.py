"""Benchmark: what the export hazard checks cost, as a ratio to the export they inspect.

Exports each module of the bundled example (`parity_gate/example/parity.yml`: cnn, encoder, mlp in
float32 and float16, dynamo exporter, optimizer on, as the gate does) and runs every
hazard rule on it, timing both side by side in one process; prints per module the
export time, the checks' time and their ratio, the rules that fired, and the total.
A run of the gate without the checks spends the export time (and more: ORT sessions
and cases); the ratio here is an upper bound of the checks' share of a module's work.
With --zoo ARCH,... it does the same for architectures of examples/zoo (needs
`transformers`). Target: total ratio <= 0.05 on the example.

    python benchmarks/hazards_cost.py
    python benchmarks/hazards_cost.py --zoo bert,gpt2,vit
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "parity_gate" / "example"))
sys.path.insert(0, str(ROOT / "tests" / "data" / "hazards"))

import pairs  # noqa: E402
import torch  # noqa: E402

from parity_gate.hazards.run import run_checks  # noqa: E402
from parity_gate.manifest.models import InputSpec  # noqa: E402

TARGET = 0.05


def _example() -> list[tuple[str, Any, list[InputSpec], list[Any]]]:
    from models import cnn, mlp, transformer

    seq = [InputSpec(name="x", dynamic={0: "batch", 1: "seq"}),
           InputSpec(name="pad", dynamic={0: "batch", 1: "seq"})]
    x = [InputSpec(name="x")]
    return [
        ("cnn/float32", cnn.build, x, [torch.randn(4, 3, 32, 32)]),
        ("encoder/float32", transformer.build, seq,
         [torch.randn(4, 12, 32), torch.rand(4, 12) < 0.2]),
        ("mlp/float32", mlp.build, x, [torch.randn(4, 16)]),
        ("mlp/float16", lambda: mlp.build().half(), x, [torch.randn(4, 16).half()]),
    ]


def _zoo(names: list[str]) -> list[tuple[str, Any, list[InputSpec], list[Any]]]:
    sys.path.insert(0, str(ROOT / "examples" / "zoo"))
    import zoo_models

    out = []
    for arch in names:
        ids = [InputSpec(name="input_ids", dynamic={0: "batch", 1: "seq"})]
        vision = arch in ("vit", "deit", "beit", "swin", "convnext", "resnet")
        inputs = [InputSpec(name="pixel_values")] if vision else ids
        example = ([torch.randn(4, 3, 32, 32)] if vision
                   else [torch.randint(0, 96, (4, 12))])
        out.append((f"zoo/{arch}", lambda a=arch: zoo_models.build(arch=a), inputs, example))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--zoo", default="", help="comma-separated zoo architectures")
    args = parser.parse_args()
    modules = _example() + (_zoo(args.zoo.split(",")) if args.zoo else [])
    # warm up the exporter once (its first call imports and registers translations)
    pairs.export("warmup", pairs.Case(lambda: torch.nn.Linear(4, 4), [(4, 4)]))
    total_export = total_checks = 0.0
    print(f"{'module':<18} {'export s':>9} {'checks s':>9} {'ratio':>7}  fired")
    for name, build, inputs, example in modules:
        torch.manual_seed(0)
        module = build()
        case = pairs.Case(build, [tuple(e.shape) for e in example], inputs=inputs)
        t0 = time.perf_counter()
        ctx = pairs.export(name, case, module=module, example=example)
        export_s = time.perf_counter() - t0
        if ctx.error:
            print(f"{name:<18} export failed: {ctx.error.splitlines()[0][:100]}")
            continue
        t0 = time.perf_counter()
        found = run_checks(ctx)
        checks_s = time.perf_counter() - t0
        total_export += export_s
        total_checks += checks_s
        fired = ", ".join(f"{h.rule} ({h.severity.value})" for h in found) or "none"
        print(f"{name:<18} {export_s:9.2f} {checks_s:9.3f} {checks_s / export_s:7.3f}  {fired}")
    ratio = total_checks / total_export if total_export else float("nan")
    print(f"{'total':<18} {total_export:9.2f} {total_checks:9.3f} {ratio:7.3f}  "
          f"(target <= {TARGET}: {'ok' if ratio <= TARGET else 'OVER'})")


if __name__ == "__main__":
    main()
