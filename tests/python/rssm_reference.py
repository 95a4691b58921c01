"""A float64 NumPy reference of the Gated DeltaNet / KDA decode step, the
plainest statement of docs/design.md §1, for the Python tests: the packed
recurrence per head,

    alpha = exp(g)                    (GDN: one per head; KDA: one per key channel)
    S_bar = S * alpha                 (KDA: S * alpha[None, :], on the key axis)
    d     = beta * (v - S_bar k)
    S     = S_bar + d k^T
    o     = S q

with q, k L2-normalised (x / sqrt(sum x^2 + 1e-6)) when asked and q scaled
(default 1/sqrt(K)); and what a slot's checkpoint plus ring encode.
"""

import numpy as np

L2NORM_EPS = float(np.float32(1e-6))  # RSSM_L2NORM_EPS, a float in C
SOFTPLUS_THRESHOLD = 20.0             # RSSM_SOFTPLUS_THRESHOLD


def softplus(x):
    x = np.asarray(x, np.float64)
    return np.where(x > SOFTPLUS_THRESHOLD, x, np.log1p(np.exp(np.minimum(x, SOFTPLUS_THRESHOLD))))


def raw_gates(a, b, A_log, dt_bias, kda, K=None, lower_bound=None):
    """g and beta from the raw projections: a [B, HV] (GDN) or [B, HV, K]
    (KDA), b [B, HV], A_log [HV], dt_bias [HV] or [HV, K]."""
    a = np.asarray(a, np.float64)
    A = np.exp(np.asarray(A_log, np.float64))
    dt = np.asarray(dt_bias, np.float64)
    if kda:
        a = a.reshape(a.shape[0], -1, K)
        dt = dt.reshape(-1, K)
        A = A[:, None]
    x = a + dt
    if lower_bound is None:
        g = -A * softplus(x)
    else:
        g = lower_bound / (1.0 + np.exp(-(A * x)))
    beta = 1.0 / (1.0 + np.exp(-np.asarray(b, np.float64)))
    return g, beta


def l2norm(x):
    return x / np.sqrt(np.sum(x * x, axis=-1, keepdims=True) + L2NORM_EPS)


def prepare_qk(q, k, l2=True, scale=None):
    """q, k [..., H, K] in float64 as the kernel uses them."""
    q = np.asarray(q, np.float64)
    k = np.asarray(k, np.float64)
    if l2:
        q, k = l2norm(q), l2norm(k)
    K = q.shape[-1]
    return q * (scale if scale else 1.0 / np.sqrt(K)), k


def step(S, q, k, v, g, beta):
    """One row, all heads, in place on S [HV, V, K] (float64): q, k [H, K]
    (normalised and scaled already), v [HV, V], g [HV] or [HV, K], beta
    [HV]. Returns o [HV, V]."""
    HV = S.shape[0]
    H = q.shape[0]
    group = HV // H
    o = np.empty(S.shape[:2])
    for hv in range(HV):
        h = hv // group
        alpha = np.exp(g[hv])                     # scalar, or [K] for KDA
        Sb = S[hv] * alpha                        # broadcasts over the key axis
        d = beta[hv] * (v[hv] - Sb @ k[h])
        S[hv] = Sb + np.outer(d, k[h])
        o[hv] = S[hv] @ q[h]
    return o


def ring_state(checkpoint, ring_d, ring_k, ring_g, n):
    """The state one slot's checkpoint [HV, V, K] and its n ring entries
    encode (docs/design.md §1):
        S = C diag(Gamma) + sum_{j<n} d_j (k_j * gamma_j)^T,
        Gamma = exp(sum_{i<n} g_i), gamma_j = exp(sum_{j<i<n} g_i)
    ring_d [HV, R, V], ring_k [H, R, K], ring_g [HV, R] or [HV, R, K]."""
    C = np.asarray(checkpoint, np.float64)
    HV, V, K = C.shape
    H = ring_k.shape[0]
    group = HV // H
    S = np.empty_like(C)
    for hv in range(HV):
        gs = np.asarray(ring_g[hv, :n], np.float64)
        if gs.ndim == 1:                          # GDN: one decay per entry, for all K
            gs = np.repeat(gs[:, None], K, axis=1)
        total = gs.sum(axis=0) if n else np.zeros(K)
        acc = C[hv] * np.exp(total)[None, :]
        for j in range(n):
            after = gs[j + 1:n].sum(axis=0) if j + 1 < n else np.zeros(K)
            kj = np.asarray(ring_k[hv // group, j], np.float64) * np.exp(after)
            acc += np.outer(np.asarray(ring_d[hv, j], np.float64), kj)
        S[hv] = acc
    return S
