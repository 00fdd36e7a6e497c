#!/usr/bin/env python3
"""Writes the KDA (Kimi Delta Attention) golden case for `specstate check-golden`.

    python3 tools/kda_golden.py                  # tests/data/golden/golden_kda_caseA.safetensors
    python3 tools/kda_golden.py --out FILE       # somewhere else
    python3 tools/kda_golden.py --lower-bound -5 # the lower-bound gate (a case of its own)
    python3 tools/kda_golden.py --fla            # also fla's own kernels' outputs (GPU, fla-core)
    python3 tools/kda_golden.py --head-k-dim 32 --head-v-dim 24   # other head sizes

The checked-in cases (K_A, K_LB) use head_k_dim 32 and head_v_dim 24, sizes the CUDA kernels take
(head_k_dim 32, 64 or 128; 24 value rows are one and a half V blocks of 16), so they run on both
backends.

One verify round of L = 2 KDA layers over a chain of T = 4 draft tokens, then the commit of the
accepted prefix, in the conventions of the GDN cases (tests/data/golden/README.md): per-layer
tensors with the suffix `.l<l>`, saved states per request row with `.r<i>`, the index tensors
without a suffix, the scalars in the `params_json` metadata (`model` = "kda").

The expected values are the float64 reference of DESIGN.md section 3's KDA step, computed below
from the float32 inputs and stored as float32 under the `ref_` names (`ref_conv_out.l0`, ...):

  - conv: one depthwise causal conv over [q | k | v] (tap W-1 multiplies the current token), plus
    the conv bias, then SiLU;
  - q, k: l2-normalised per key head, x / sqrt(sum x^2 + 1e-6) (the eps inside the sqrt, so a zero
    q/k stays zero); q scaled by K^-1/2; value head hv reads key head hv // (HV / H);
  - gate, per value head hv and key channel i, x = g_raw[hv][i] + dt_bias[hv][i]:
      plain (this case): g = -exp(A_log[hv]) * softplus(x), softplus threshold 20 (PyTorch's);
      lower bound (KdaConfig::lower_bound, --lower-bound): g = lb * sigmoid(exp(A_log[hv]) * x);
    one pool has one gate (the lower bound is a KdaConfig field), so one case uses one gate;
  - beta = sigmoid(b);
  - state S[hv] of shape [V][K] (K contiguous, specstate's layout): S[v][i] *= exp(g[i]);
    u = beta (v - S k^); S += u k^T; o = S q~.

Case A holds degenerate tokens: a token whose q and k of one key head are exactly zero (zero
inputs, zero history and zero bias on those channels: SiLU(0) = 0), gate inputs at the softplus
threshold (x = 19.99, 20.0, 20.01: total forgetting) and far below it (x = -30: no decay), beta
logits of +10 and -10; rows: three that accept 1, 4 and 2 tokens, one real row that accepts 0
(keeps its slot) and one padding row (slot -1); slot 2 is named by no row.

--fla (a CUDA GPU with torch, triton and fla-core 0.6.0): the same inputs, and also what fla's own
kernels produce for them, under the un-prefixed names (`conv_out.l0`, `core_out.l0`,
`inter_conv_window.l0`, `inter_ssm.l0.r0`, `conv_state_committed.l0`, `ssm_state_committed.l0`),
as the GDN cases hold SGLang's; check-golden then compares against both (ref_ at the act dtype's
tolerance, fla's at twice it). The conv is fla's `causal_conv1d_update` (its cache [D, W] holds the
window in columns 1..W-1), one call per token; the recurrence is fla's verify path,
`fused_recurrent_kda_fwd` with `ssm_state_indices` of shape [1, T] (the state after token t stored
in place at slot 1 + t, the start state read from slot 1), `use_qk_l2norm_in_kernel`, the gate and
beta sigmoid fused (A_log, dt_bias [HV, K], lower_bound), and `state_v_first=True`: fla's [HV][V][K]
layout, which is specstate's. Without --fla the un-prefixed names are absent and check-golden says
so.
"""

import argparse
import json
import os
import struct
import sys

import numpy as np

L, R, T = 2, 5, 4
H, HV, K, V, W = 2, 4, 32, 24, 4
S_SLOTS = 5
D = 2 * H * K + HV * V
CACHE_INDICES = [4, 3, 1, 0, -1]
ACCEPT_LEN = [1, 4, 2, 0, 0]
SEED = 20261202


def softplus(x):
    return np.where(x > 20.0, x, np.log1p(np.exp(np.minimum(x, 20.0))))


def make_inputs(rng):
    """float32 inputs of every layer, with the degenerate tokens described in the docstring."""
    f32 = np.float32
    layers = []
    for l in range(L):
        x = {}
        x["mixed_qkv"] = rng.standard_normal((R, T, D)).astype(f32)
        x["g"] = rng.standard_normal((R, T, HV, K)).astype(f32)
        x["b"] = rng.standard_normal((R, T, HV)).astype(f32)
        x["conv_weight"] = (rng.standard_normal((D, W)) * 0.5).astype(f32)
        x["conv_bias"] = (rng.standard_normal(D) * 0.1).astype(f32)
        x["A_log"] = np.log(rng.uniform(1, 16, HV)).astype(f32)
        dt = np.exp(rng.uniform(np.log(1e-3), np.log(1e-1), (HV, K)))
        x["dt_bias"] = np.log(np.expm1(dt)).astype(f32)
        x["conv_state_init"] = rng.standard_normal((S_SLOTS, D, W - 1)).astype(f32)
        x["ssm_state_init"] = (rng.standard_normal((S_SLOTS, HV, V, K)) * 0.5).astype(f32)
        layers.append(x)

    # Layer 1, row 2 (slot 1), token 0: q and k of key head 1 exactly zero.
    x = layers[1]
    qk_channels = list(range(1 * K, 2 * K)) + list(range(H * K + 1 * K, H * K + 2 * K))
    x["conv_bias"][qk_channels] = 0.0
    x["conv_state_init"][1, qk_channels, :] = 0.0
    x["mixed_qkv"][2, 0, qk_channels] = 0.0
    # Gate inputs at the softplus threshold and far below it (layer 0): x = g_raw + dt_bias.
    x = layers[0]
    for (r, t, hv, i, target) in [(1, 1, 0, 3, 20.0), (1, 1, 0, 4, 19.99), (1, 1, 0, 5, 20.01),
                                  (1, 2, 2, 0, 20.0), (0, 0, 3, 7, 20.0)]:
        x["g"][r, t, hv, i] = f32(target - float(x["dt_bias"][hv, i]))
    x["g"][1, 3, 1, :] = -30.0  # no decay for value head 1 of row 1's last token
    x["g"][2, 1, 3, :] = -30.0
    # Beta logits of +-10.
    x["b"][1, 0, 1] = 10.0
    x["b"][1, 2, 2] = -10.0
    layers[1]["b"][2, 1, 0] = 10.0
    layers[1]["b"][0, 0, 3] = -10.0
    return layers


def commit(x, out):
    """The commit of the round: each real row's slot takes its saved window and state at
    `last_step` (a row that accepts 0 keeps its slot); adds the committed pools to `out`."""
    conv_c = x["conv_state_init"].astype(np.float64).copy()
    ssm_c = x["ssm_state_init"].astype(np.float64).copy()
    for r, slot in enumerate(CACHE_INDICES):
        if slot >= 0 and ACCEPT_LEN[r] > 0:
            conv_c[slot] = out["inter_conv_window"][r, ACCEPT_LEN[r] - 1]
            ssm_c[slot] = out["inter_ssm"][r, ACCEPT_LEN[r] - 1]
    out["conv_state_committed"] = conv_c
    out["ssm_state_committed"] = ssm_c
    return out


def reference_layer(x, lower_bound, scale):
    """float64 reference of one layer: conv_out [R,T,D], windows [R,T,D,W-1], core_out
    [R,T,HV,V], states [R,T,HV,V,K]; padding rows stay zero."""
    out = {"conv_out": np.zeros((R, T, D)), "inter_conv_window": np.zeros((R, T, D, W - 1)),
           "core_out": np.zeros((R, T, HV, V)), "inter_ssm": np.zeros((R, T, HV, V, K))}
    cw = x["conv_weight"].astype(np.float64)
    cb = x["conv_bias"].astype(np.float64)
    A = np.exp(x["A_log"].astype(np.float64))
    dtb = x["dt_bias"].astype(np.float64)
    for r, slot in enumerate(CACHE_INDICES):
        if slot < 0:
            continue
        win = x["conv_state_init"][slot].astype(np.float64)
        S = x["ssm_state_init"][slot].astype(np.float64).copy()
        for t in range(T):
            full = np.concatenate([win, x["mixed_qkv"][r, t].astype(np.float64)[:, None]], axis=1)
            y = (full * cw).sum(1) + cb
            y = y / (1.0 + np.exp(-y))
            win = full[:, 1:]
            out["conv_out"][r, t] = y
            out["inter_conv_window"][r, t] = win
            for hv in range(HV):
                h = hv // (HV // H)
                q = y[h * K:(h + 1) * K]
                k = y[H * K + h * K:H * K + (h + 1) * K]
                v = y[2 * H * K + hv * V:2 * H * K + (hv + 1) * V]
                q = q / np.sqrt((q * q).sum() + 1e-6) * scale
                k = k / np.sqrt((k * k).sum() + 1e-6)
                xg = x["g"][r, t, hv].astype(np.float64) + dtb[hv]
                if lower_bound is None:
                    g = -A[hv] * softplus(xg)
                else:
                    g = lower_bound / (1.0 + np.exp(-A[hv] * xg))
                beta = 1.0 / (1.0 + np.exp(-float(x["b"][r, t, hv])))
                S[hv] *= np.exp(g)[None, :]
                u = beta * (v - S[hv] @ k)
                S[hv] += np.outer(u, k)
                out["core_out"][r, t, hv] = S[hv] @ q
            out["inter_ssm"][r, t] = S
    return commit(x, out)


def fla_layer(x, lower_bound, scale):
    """One layer through fla's kernels (float32 on the GPU): the same tensors as
    reference_layer, as float64 arrays."""
    import torch
    from fla.modules.causal_conv1d import causal_conv1d_update
    from fla.ops.kda.fused_recurrent import fused_recurrent_kda_fwd

    dev = torch.device("cuda")
    f32 = torch.float32
    out = {"conv_out": np.zeros((R, T, D)), "inter_conv_window": np.zeros((R, T, D, W - 1)),
           "core_out": np.zeros((R, T, HV, V)), "inter_ssm": np.zeros((R, T, HV, V, K))}
    weight = torch.tensor(x["conv_weight"], dtype=f32, device=dev).contiguous()
    bias = torch.tensor(x["conv_bias"], dtype=f32, device=dev).contiguous()
    A_log = torch.tensor(x["A_log"], dtype=f32, device=dev).contiguous()
    dt_bias = torch.tensor(x["dt_bias"], dtype=f32, device=dev).contiguous()  # [HV, K]
    for r, slot in enumerate(CACHE_INDICES):
        if slot < 0:
            continue
        cache = torch.zeros((1, D, W), dtype=f32, device=dev)
        cache[0, :, 1:] = torch.tensor(x["conv_state_init"][slot], dtype=f32, device=dev)
        ys = []
        for t in range(T):
            xt = torch.tensor(x["mixed_qkv"][r, t][None, :], dtype=f32, device=dev).contiguous()
            y, cache = causal_conv1d_update(xt, cache, weight=weight, bias=bias, activation="silu")
            ys.append(y[0])
            out["conv_out"][r, t] = y[0].double().cpu().numpy()
            out["inter_conv_window"][r, t] = cache[0, :, 1:].double().cpu().numpy()
        y = torch.stack(ys)  # [T, D]
        q = y[:, :H * K].reshape(1, T, H, K).contiguous()
        k = y[:, H * K:2 * H * K].reshape(1, T, H, K).contiguous()
        v = y[:, 2 * H * K:].reshape(1, T, HV, V).contiguous()
        g = torch.tensor(x["g"][r][None], dtype=f32, device=dev).contiguous()  # [1, T, HV, K]
        beta = torch.tensor(x["b"][r][None], dtype=f32, device=dev).contiguous()  # [1, T, HV]
        states = torch.zeros((T + 1, HV, V, K), dtype=f32, device=dev)
        states[1] = torch.tensor(x["ssm_state_init"][slot], dtype=f32, device=dev)
        indices = torch.arange(1, T + 1, dtype=torch.int32, device=dev)[None, :].contiguous()
        o, _ = fused_recurrent_kda_fwd(
            q=q, k=k, v=v, g=g, beta=beta, A_log=A_log, dt_bias=dt_bias, initial_state=states,
            scale=scale, inplace_final_state=True, state_v_first=True,
            ssm_state_indices=indices, use_qk_l2norm_in_kernel=True, use_gate_in_kernel=True,
            use_beta_sigmoid_in_kernel=True, lower_bound=lower_bound)
        torch.cuda.synchronize()
        out["core_out"][r] = o[0].double().cpu().numpy()
        out["inter_ssm"][r] = states[1:].double().cpu().numpy()
    return commit(x, out)


def write_safetensors(path, tensors, metadata):
    """tensors: list of (name, array of float32 or int32); little-endian, row-major, contiguous."""
    header, blobs, offset = {}, [], 0
    for name, a in tensors:
        a = np.ascontiguousarray(a)
        dtype = {np.dtype(np.float32): ("F32", "<f4"), np.dtype(np.int32): ("I32", "<i4")}[a.dtype]
        data = a.astype(dtype[1]).tobytes()
        header[name] = {"dtype": dtype[0], "shape": list(a.shape),
                        "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    header["__metadata__"] = metadata
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for blob in blobs:
            f.write(blob)


def main():
    global K, V, D
    here = os.path.dirname(os.path.abspath(__file__))
    default_out = os.path.join(here, "..", "tests", "data", "golden", "golden_kda_caseA.safetensors")
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default=default_out)
    parser.add_argument("--lower-bound", type=float, default=None,
                        help="use the lower-bound gate (finite, negative; fla's default -5)")
    parser.add_argument("--case", default=None, help="case name (default K_A, K_LB with a bound)")
    parser.add_argument("--head-k-dim", type=int, default=K, help=f"K (default {K})")
    parser.add_argument("--head-v-dim", type=int, default=V, help=f"V (default {V})")
    parser.add_argument("--fla", action="store_true",
                        help="also store fla's own kernels' outputs (a CUDA GPU, torch, fla-core)")
    args = parser.parse_args()
    if args.head_k_dim < 2 or args.head_v_dim < 1:
        sys.exit("kda_golden.py: --head-k-dim must be >= 2 and --head-v-dim >= 1")
    K, V = args.head_k_dim, args.head_v_dim
    D = 2 * H * K + HV * V
    if args.lower_bound is not None and not (np.isfinite(args.lower_bound) and args.lower_bound < 0):
        sys.exit("kda_golden.py: --lower-bound must be finite and negative")
    case = args.case or ("K_A" if args.lower_bound is None else "K_LB")

    rng = np.random.default_rng(SEED)
    layers = make_inputs(rng)
    scale = float(np.float32(K ** -0.5))
    last_step = [a - 1 if s >= 0 else -1 for a, s in zip(ACCEPT_LEN, CACHE_INDICES)]
    tensors = [
        ("cache_indices", np.array(CACHE_INDICES, np.int32)),
        ("accept_len", np.array(ACCEPT_LEN, np.int32)),
        ("last_step", np.array(last_step, np.int32)),
        ("query_start_loc", np.array([0] + [T * (r + 1) if s >= 0 else T * r for r, s in
                                           enumerate(CACHE_INDICES)], np.int32)),
        ("intermediate_state_indices", np.arange(R, dtype=np.int32)),
        ("parents", np.arange(-1, T - 1, dtype=np.int32)),
    ]
    fla_version = None
    if args.fla:
        try:
            import fla  # noqa: F401  (fla-core)
            import torch
        except ImportError as e:
            sys.exit(f"kda_golden.py: --fla needs torch and fla-core ({e}). Nothing written.")
        if not torch.cuda.is_available():
            sys.exit("kda_golden.py: --fla needs a CUDA GPU (fla's kernels are Triton). Nothing written.")
        fla_version = fla.__version__
    for l, x in enumerate(layers):
        ref = reference_layer(x, args.lower_bound, scale)
        if args.fla:
            got = fla_layer(x, args.lower_bound, scale)
            for name in ["conv_out", "inter_conv_window", "core_out", "conv_state_committed",
                         "ssm_state_committed"]:
                tensors.append((f"{name}.l{l}", got[name].astype(np.float32)))
            for r in range(R):
                if CACHE_INDICES[r] >= 0:
                    tensors.append((f"inter_ssm.l{l}.r{r}", got["inter_ssm"][r].astype(np.float32)))
        for name in ["mixed_qkv", "g", "b", "conv_weight", "conv_bias", "A_log", "dt_bias",
                     "conv_state_init", "ssm_state_init"]:
            tensors.append((f"{name}.l{l}", x[name]))
        for name in ["conv_out", "inter_conv_window", "core_out", "conv_state_committed",
                     "ssm_state_committed"]:
            tensors.append((f"ref_{name}.l{l}", ref[name].astype(np.float32)))
        for r in range(R):
            if CACHE_INDICES[r] < 0:
                continue  # a padding row saves no state (check-golden compares real rows only)
            tensors.append((f"ref_inter_ssm.l{l}.r{r}", ref["inter_ssm"][r].astype(np.float32)))

    params = {
        "case": case, "model": "kda", "L": L, "rows": R, "n_real": sum(s >= 0 for s in CACHE_INDICES),
        "n_pad": sum(s < 0 for s in CACHE_INDICES), "T": T, "H": H, "HV": HV, "K": K, "V": V,
        "conv_dim": D, "width": W, "slots": S_SLOTS, "act_dtype": "f32", "conv_state_dtype": "f32",
        "conv_weight_dtype": "f32", "gate_param_dtype": "f32", "ssm_state_dtype": "f32",
        "has_conv_bias": True, "activation": "silu", "scale": scale,
        "use_qk_l2norm_in_kernel": True, "l2norm_eps": 1e-6, "softplus_threshold": 20.0,
        "gate": "plain" if args.lower_bound is None else "lower_bound",
        "lower_bound": args.lower_bound, "tree": False, "pad_slot_id": -1,
        "conv_row_layout": "[q (H*K) | k (H*K) | v (HV*V)]",
        "ssm_state_layout": "[slots, HV, V, K], K contiguous (fla keeps [HV, K, V])",
        "dt_bias_layout": "[HV, K] (fla's per-key-channel bias)",
        "g_layout": "[rows, T, HV, K] raw gate, before dt_bias",
        "expected": ("float64 reference (tools/kda_golden.py, ref_*)" +
                     (f"; fla-core {fla_version} kernels (un-prefixed)" if fla_version else
                      "; no fla tensors (run with --fla on a GPU)")),
        "cache_indices": CACHE_INDICES, "accept_len": ACCEPT_LEN, "last_step": last_step,
        "parents": list(range(-1, T - 1)), "seed": SEED,
    }
    if args.lower_bound is None:
        del params["lower_bound"]
    if fla_version:
        params["fla_version"] = fla_version
        params["fla_kernels"] = ("fla.modules.causal_conv1d.causal_conv1d_update, "
                                 "fla.ops.kda.fused_recurrent.fused_recurrent_kda_fwd")
    metadata = {"case": case, "params_json": json.dumps(params), "part": "0", "nparts": "1"}
    write_safetensors(args.out, tensors, metadata)
    print(f"wrote {args.out} ({os.path.getsize(args.out)} bytes, case {case})")


if __name__ == "__main__":
    main()
