"""Pursuit attack: the message is a sum of per-point Jacobian atoms (eq. 6 by
the chain rule), checked against the production gradient; the fit, the implied
targets and recovery of a small known case."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from pacd_jax import metrics, pursuit
from pacd_jax.gp import GPData, MetaGP, MetaGPConfig, gmll_grads


def _case(m, hidden=(8, 8), K=3, seed=0):
    model = MetaGP(MetaGPConfig(dim=2, hidden=hidden, features=2))
    particles = model.sample_hyperprior(jax.random.key(seed), K, jnp.float64)
    X = jax.random.uniform(jax.random.key(seed + 1), (m, 2), jnp.float64)
    y = jax.random.normal(jax.random.key(seed + 2), (m,), jnp.float64)
    y = (y - y.mean()) / y.std()
    # the message as a client sends it: a padded buffer, the production gradient
    size = m + 3
    data = GPData(jnp.zeros((size, 2)).at[:m].set(X), jnp.zeros((size,)).at[:m].set(y), jnp.arange(size) < m)
    return model, particles, X, y, gmll_grads(model, particles, data)


def test_message_is_exactly_a_combination_of_the_points_atoms():
    with jax.enable_x64(True):
        model, particles, X, y, grads = _case(7)
        coords = jnp.asarray(model.network_coordinates())
        J = pursuit.atoms(model, particles, X, coords)
        c, resid = pursuit.fit_coefficients(J, grads[:, coords], jnp.ones(7), ridge=1e-14)
        rel = float(jnp.sum(resid**2) / jnp.sum(grads[:, coords] ** 2))
        assert rel < 1e-18
        # the mean atoms' coefficients are alpha = K^-1 (y - m): they give back y
        y_back = pursuit.implied_targets(model, particles, X, c[..., 0])
        np.testing.assert_allclose(np.asarray(y_back), np.asarray(y), atol=1e-6)
        # and the same fit at wrong points leaves a residual: the check can fail
        X_wrong = X.at[0].set(jnp.array([0.9, 0.1]) if float(X[0, 0]) < 0.5 else jnp.array([0.1, 0.9]))
        _, resid_w = pursuit.fit_coefficients(pursuit.atoms(model, particles, X_wrong, coords), grads[:, coords], jnp.ones(7), 1e-14)
        assert float(jnp.sum(resid_w**2) / jnp.sum(grads[:, coords] ** 2)) > 1e-6


def test_network_coordinates_are_the_weights_of_both_networks():
    model = MetaGP(MetaGPConfig(dim=2, hidden=(8, 8), features=2))
    coords = model.network_coordinates()
    # every parameter except the noise and the per-feature lengthscales
    assert len(coords) == model.num_params - 1 - 2
    assert len(np.unique(coords)) == len(coords)


def test_inactive_slots_get_zero_coefficients():
    with jax.enable_x64(True):
        model, particles, X, y, grads = _case(5)
        coords = jnp.asarray(model.network_coordinates())
        J = pursuit.atoms(model, particles, X, coords)
        active = jnp.array([1.0, 1.0, 0.0, 1.0, 0.0])
        c, _ = pursuit.fit_coefficients(J, grads[:, coords], active, 1e-9)
        assert np.all(np.asarray(c)[:, [2, 4]] == 0.0)


def test_removal_costs_equal_refitting_without_each_point():
    """Oracle: refit the regularised least squares without point j by numpy's lstsq on the augmented system."""
    rng = np.random.default_rng(0)
    K, M, O, P, lam = 2, 5, 3, 40, 1e-3
    J = rng.normal(size=(K, M, O, P))
    t = rng.normal(size=(K, P))
    active = np.array([1.0, 1.0, 1.0, 1.0, 0.0])
    B_full = (J * active[None, :, None, None]).reshape(K, M * O, P)
    scale = np.einsum("kap,kap->k", B_full, B_full) / (active.sum() * O)

    def objective(a):  # the ridge scale stays the full set's, as in the identity
        B = (J * a[None, :, None, None]).reshape(K, M * O, P)
        total = 0.0
        for k in range(K):
            A = np.concatenate([B[k].T, np.sqrt(lam * scale[k]) * np.eye(M * O)])
            b = np.concatenate([t[k], np.zeros(M * O)])
            c = np.linalg.lstsq(A, b, rcond=None)[0]
            total += np.sum((A @ c - b) ** 2)
        return total

    with jax.enable_x64(True):
        costs = np.asarray(pursuit.removal_costs(jnp.asarray(J), jnp.asarray(t), jnp.asarray(active), lam))
    base = objective(active)
    expected = [objective(np.where(np.arange(M) == j, 0.0, active)) - base for j in range(4)]
    np.testing.assert_allclose(costs[:4], expected, rtol=1e-8)
    assert np.isinf(costs[4]) and np.all(costs[:4] > 0)


@pytest.mark.heavy  # pursuit attacks; test_follow_recovers_every_round_of_a_growing_data_set stays in CI
@pytest.mark.parametrize("m, search_particles", [(3, None), (6, 2)])
def test_recovers_a_small_known_case(m, search_particles):
    with jax.enable_x64(True):
        model, particles, X, y, grads = _case(m, seed=10 + m)
        # (6, 2): on two of the three particles the exchanges can stall on a wrong
        # set (they do without XLA's CI flags); widening to all three recovers it
        cfg = pursuit.PursuitConfig(candidates=1024, swaps=12, exchange_steps=50, search_particles=search_particles)
        res = pursuit.pursuit_attack(model, particles, grads, m, jax.random.key(0), cfg)
        assert res.X.shape == (m, 2) and res.y.shape == (m,)
        assert metrics.matched_rmse(res.X, np.asarray(X)) < 1e-4
        assert res.loss < 1e-8


@pytest.mark.heavy  # float64 pursuit attacks
@pytest.mark.parametrize("tol", [0.0, 1.0])
def test_stalled_exchanges_widen_to_all_particles(tol):
    """On one particle, after 20 refining steps (residual ~1e-8), no exchange
    gains: with ``tol = 0`` the search goes on with both particles before
    polishing (``widen``); with a residual already below ``tol`` there are no
    exchanges at all."""
    with jax.enable_x64(True):
        model, particles, X, y, grads = _case(2, K=2, seed=21)
        cfg = pursuit.PursuitConfig(candidates=256, shortlist=32, grow_steps=5, final_steps=20, swaps=3, exchange_steps=10,
                                    search_particles=1, tol=tol)
        res = pursuit.pursuit_attack(model, particles, grads, 2, jax.random.key(0), cfg)
    stages = [name for name, _ in res.history]
    assert res.swaps == 0 and metrics.matched_rmse(res.X, np.asarray(X)) < 1e-4
    assert stages == ["grow", "refine", *(["widen to 2"] if tol == 0.0 else []), "polish"]
    assert tol == 0.0 or res.history[1][1] < tol


def test_config_validates():
    with pytest.raises(ValueError, match="candidates"):
        pursuit.PursuitConfig(candidates=0)
    with pytest.raises(ValueError, match="swap_gain"):
        pursuit.PursuitConfig(swap_gain=1.5)
    with pytest.raises(ValueError, match="radii"):
        pursuit.PursuitConfig(radii=(0.7,))
    with pytest.raises(ValueError, match="ridge_final"):
        pursuit.PursuitConfig(ridge_final=0.0)
    with pytest.raises(ValueError, match="search_particles"):
        pursuit.PursuitConfig(search_particles=0)
    with pytest.raises(ValueError, match="tol"):
        pursuit.PursuitConfig(tol=-1.0)
    with pytest.raises(ValueError, match="widen"):
        pursuit.PursuitConfig(widen=1)


def _growing_records(ms, hidden=(8, 8), K=3, seed=30, X=None):
    """Messages of one client whose data grow (its first ``m`` points at each record), as a coordinator receives them."""
    from pacd_jax.intercept import Record

    model = MetaGP(MetaGPConfig(dim=2, hidden=hidden, features=2))
    X = jax.random.uniform(jax.random.key(seed + 1), (max(ms), 2), jnp.float64) if X is None else jnp.asarray(X, jnp.float64)
    y_all = jax.random.normal(jax.random.key(seed + 2), (max(ms),), jnp.float64)
    records, truths = [], []
    for t, m in enumerate(ms):
        # the particles move between rounds, as SVGD moves them
        particles = model.sample_hyperprior(jax.random.key(seed + 100 + t), K, jnp.float64)
        y = (y_all[:m] - y_all[:m].mean()) / y_all[:m].std()
        size = max(ms) + 2
        data = GPData(jnp.zeros((size, 2)).at[:m].set(X[:m]), jnp.zeros((size,)).at[:m].set(y), jnp.arange(size) < m)
        grads = gmll_grads(model, particles, data)
        records.append(Record(t, 0, m, np.asarray(particles), np.asarray(grads), np.array([[0.0, 1.0]] * 2)))
        truths.append(np.asarray(X[:m]))
    return model, records, truths


def test_follow_recovers_every_round_of_a_growing_data_set():
    """The attacker follows rounds of 3, 4, 5 and 7 points (the last adds two);
    every round's reconstruction is the truth to 1e-4. Padding to 4 rows
    gives buffers of 4, 8, 8 and 8 rows: every round has a free slot for
    the exchanges. ``FollowStep.carried`` and ``reference`` are the whole
    state between rounds: continuing from round 1's gives rounds 2-3 exactly
    as the follow that never stopped."""
    with jax.enable_x64(True):
        model, records, truths = _growing_records([3, 4, 5, 7])
        cfg = pursuit.PursuitConfig(candidates=1024, shortlist=64, swaps=12, exchange_steps=50, search_particles=None,
                                    converged_rtol=1e-6)
        seen = []
        steps = pursuit.pursuit_follow(model, records, jax.random.key(0), cfg, pad=4, on_step=seen.append)
        rest = pursuit.pursuit_follow(model, records[2:], jax.random.key(0), cfg, pad=4, start=steps[1].carried,
                                      reference=steps[1].reference)
    for a, b in zip(steps[2:], rest, strict=True):
        assert a.round == b.round and a.reference == b.reference and a.result.loss == b.result.loss
        np.testing.assert_array_equal(a.result.X, b.result.X)
        np.testing.assert_array_equal(a.carried, b.carried)
    # the carried points are the unclipped ones the next round starts from; the result is them clipped to the box
    np.testing.assert_array_equal(steps[1].result.X, np.clip(steps[1].carried, 0.0, 1.0))
    assert [s.round for s in steps] == [0, 1, 2, 3] and seen == steps
    for s, X in zip(steps, truths):
        assert s.result.X.shape == X.shape and s.result.y.shape == (len(X),)
        assert metrics.matched_rmse(s.result.X, X) < 1e-4, (s.round, metrics.matched_rmse(s.result.X, X))
        assert s.result.loss < 1e-8 and s.time_s > 0
    # the earlier points are kept: a later round does not start over
    assert [name for name, _ in steps[1].result.history][0] == "grow"


@pytest.mark.heavy  # compiles the follow attack
def test_follow_rejects_shrinking_data_and_bad_pad():
    with jax.enable_x64(True):
        model, records, _ = _growing_records([4, 3])
        cfg = pursuit.PursuitConfig(candidates=256, shortlist=16, swaps=0, final_steps=5, grow_steps=2, polish=0)
        with pytest.raises(ValueError, match="must not shrink"):
            pursuit.pursuit_follow(model, records, jax.random.key(0), cfg)
        with pytest.raises(ValueError, match="pad"):
            pursuit.pursuit_follow(model, records, jax.random.key(0), cfg, pad=0)


@pytest.mark.heavy  # two pursuit attacks
def test_exchange_into_a_free_slot_equals_growing_the_buffer():
    """A padded buffer (one free slot) and an unpadded one give the same exchange pass."""
    with jax.enable_x64(True):
        model, particles, X, y, grads = _case(4, seed=40)
        cfg = pursuit.PursuitConfig(candidates=256, shortlist=32, exchange_steps=20, grow_steps=5)
        fns = pursuit._Functions(model, cfg, jnp.asarray(model.network_coordinates()))
        msg = pursuit._Message(fns, particles, grads, jax.random.key(1))
        z = X.at[0].set(jnp.array([0.5, 0.5]))  # one point misplaced
        active = jnp.ones(4)
        loss = float(msg.all.loss(z, active))
        plain = pursuit._exchange(msg.all, msg.sobol, msg.gram_inv, msg.offsets, z, active, loss)
        padded = pursuit._exchange(msg.all, msg.sobol, msg.gram_inv, msg.offsets, jnp.concatenate([z, jnp.full((1, 2), 0.5)]),
                                   jnp.array([1.0, 1.0, 1.0, 1.0, 0.0]), loss)
    assert plain is not None and padded is not None
    assert padded[1] < 0.9 * loss
    np.testing.assert_allclose(padded[1], plain[1], rtol=1e-6, atol=1e-14)
    # the same point set (a pruned point's slot takes the new one, where the unpadded buffer deletes its row)
    assert metrics.matched_rmse(np.asarray(padded[0])[:4], np.asarray(plain[0])) < 1e-6


def test_levenberg_marquardt_returns_to_the_truth_from_nearby():
    """Oracle: the true points (they explain the message to round-off). From
    the truth moved by ~1e-3, a few damped Gauss-Newton steps on the
    variable-projection residual come back to it; 15 L-BFGS steps do not get as close."""
    with jax.enable_x64(True):
        model, particles, X, y, grads = _case(6, seed=50)
        cfg = pursuit.PursuitConfig()
        fns = pursuit._Functions(model, cfg, jnp.asarray(model.network_coordinates()))
        msg = pursuit._Message(fns, particles, grads, jax.random.key(0))
        z0 = jnp.concatenate([X + 1e-3 * jax.random.normal(jax.random.key(3), X.shape), jnp.full((2, 2), 0.5)])
        active = jnp.array([1.0] * 6 + [0.0] * 2)
        trace = []
        z, loss = pursuit._levenberg_marquardt(msg.all, z0, active, 30, trace=trace)
        z_lbfgs = fns.short(particles, msg.target, z0, active)  # grow_steps (15) L-BFGS steps
        start = float(msg.all.loss_lm(z0, active))
        short = [pursuit._levenberg_marquardt(msg.all, z0, active, k)[1] for k in (1, 2, 3)]
    # the trace's k-th entry is what a k-step run returns (oracle: separate runs), and the steps made real progress
    assert trace[:3] == short
    assert len(trace) <= 30 and trace[-1] < 1e-6 * start
    assert np.all(np.asarray(z[6:]) == 0.5)  # inactive slots stay put
    assert metrics.matched_rmse(np.asarray(z[:6]), np.asarray(X)) < 1e-8 and loss < 1e-16
    assert metrics.matched_rmse(np.asarray(z_lbfgs[:6]), np.asarray(X)) > metrics.matched_rmse(np.asarray(z[:6]), np.asarray(X))


def test_levenberg_marquardt_moves_only_the_movable_points_and_places_a_new_one():
    """Oracle: the true points. With the last point moved 1e-3 off and only
    it movable, the polish brings it back to the truth while every other
    point stays exactly where it was (the fit still uses all of them)."""
    with jax.enable_x64(True):
        model, particles, X, y, grads = _case(6, seed=50)
        fns = pursuit._Functions(model, pursuit.PursuitConfig(), jnp.asarray(model.network_coordinates()))
        msg = pursuit._Message(fns, particles, grads, jax.random.key(0))
        z0 = jnp.concatenate([jnp.asarray(X).at[5].add(jnp.array([1e-3, -7e-4])), jnp.full((2, 2), 0.5)])
        active = jnp.array([1.0] * 6 + [0.0] * 2)
        movable = jnp.array([0.0] * 5 + [1.0] + [0.0] * 2)
        z, loss = pursuit._levenberg_marquardt(msg.all, z0, active, 30, movable=movable)
        start = float(msg.all.loss_lm(z0, active))
    assert np.all(np.asarray(z)[:5] == np.asarray(z0)[:5]) and np.all(np.asarray(z)[6:] == 0.5)
    assert np.linalg.norm(np.asarray(z)[5] - np.asarray(X)[5]) < 1e-6 and loss < 1e-6 * start


def test_levenberg_marquardt_trust_region_bounds_every_step():
    """``max_step``: with one point 0.03 off the truth and steps of at most
    0.004, no k-step run moves any point farther than 0.004 k (each
    k-step run returns the k-th iterate: oracle by separate runs); with
    enough steps it still comes back to the truth (oracle), and an
    unbounded polish from the same start gets there in fewer steps."""
    with jax.enable_x64(True):
        model, particles, X, y, grads = _case(6, seed=50)
        fns = pursuit._Functions(model, pursuit.PursuitConfig(), jnp.asarray(model.network_coordinates()))
        msg = pursuit._Message(fns, particles, grads, jax.random.key(0))
        z0 = jnp.concatenate([jnp.asarray(X).at[2].add(jnp.array([0.03, -0.01])), jnp.full((2, 2), 0.5)])
        active = jnp.array([1.0] * 6 + [0.0] * 2)
        previous = np.asarray(z0)
        for k in (1, 2, 3, 4):
            z, _ = pursuit._levenberg_marquardt(msg.all, z0, active, k, max_step=0.004)
            moved = np.linalg.norm(np.asarray(z) - np.asarray(z0), axis=1)
            assert moved.max() <= 0.004 * k + 1e-12, (k, moved.max())
            assert np.linalg.norm(np.asarray(z) - previous, axis=1).max() <= 0.004 + 1e-12
            previous = np.asarray(z)
        trace, free = [], []
        z, loss = pursuit._levenberg_marquardt(msg.all, z0, active, 60, max_step=0.004, trace=trace)
        _, _ = pursuit._levenberg_marquardt(msg.all, z0, active, 60, trace=free)
    assert metrics.matched_rmse(np.asarray(z[:6]), np.asarray(X)) < 1e-6 and np.all(np.asarray(z[6:]) == 0.5)
    assert len(free) < len(trace)


def test_levenberg_marquardt_fits_an_accepted_try_once():
    """The residual that comes with the Gauss-Newton system is the one the
    separate residual function computes (oracle), and a step accepted right
    after an accepted one costs one fit: 1 + (tries) + (acceptances right
    after a rejection) fits in all, counted by a proxy."""
    with jax.enable_x64(True):
        model, particles, X, y, grads = _case(6, seed=50)
        fns = pursuit._Functions(model, pursuit.PursuitConfig(), jnp.asarray(model.network_coordinates()))
        msg = pursuit._Message(fns, particles, grads, jax.random.key(0))
        z0 = jnp.concatenate([X + 3e-2 * jax.random.normal(jax.random.key(4), X.shape), jnp.full((2, 2), 0.5)])
        active = jnp.array([1.0] * 6 + [0.0] * 2)
        for z in (z0, z0.at[0].add(0.1)):
            np.testing.assert_allclose(float(msg.all.gauss_newton(z, active)[2]), float(msg.all.loss_lm(z, active)), rtol=1e-9)

        calls = []

        class Counting:
            fns = msg.all.fns

            def gauss_newton(self, z, a):
                calls.append("gn")
                return msg.all.gauss_newton(z, a)

            def loss_lm(self, z, a):
                calls.append("loss")
                return msg.all.loss_lm(z, a)

        trace = []
        _, loss = pursuit._levenberg_marquardt(Counting(), z0, active, 40, trace=trace)
        f0 = float(msg.all.loss_lm(z0, active))
    accepted = np.asarray(trace) < np.asarray([f0] + trace[:-1])
    after_rejection = int(np.sum(accepted[1:] & ~accepted[:-1]))
    assert accepted.sum() >= 3 and loss < 1e-3 * f0  # a real descent
    assert len(calls) == 1 + len(trace) + after_rejection
    assert accepted[0] or np.any(accepted[1:] & accepted[:-1])  # some acceptance the old scheme fitted twice


def test_ortho_scores_equal_the_projection_onto_the_new_atoms_outside_the_active_span():
    """Oracle (numpy least squares in float64): a candidate's score is the part
    of the residual its atoms explain once the active atoms are projected out,
    summed over particles. The residual here has a part inside the active
    span (as a ridge fit leaves): it must not count, or candidates whose
    atoms nearly lie in that span (next to an earlier point) win on it."""
    with jax.enable_x64(True):
        model, particles, X, y, grads = _case(5, seed=50)
        cfg = pursuit.PursuitConfig(candidates=64, shortlist=8)
        coords = jnp.asarray(model.network_coordinates())
        fns = pursuit._Functions(model, cfg, coords)
        J = pursuit.atoms(model, particles, X, coords)
        active = jnp.array([1.0, 1.0, 1.0, 0.0, 1.0])
        resid = jax.random.normal(jax.random.key(3), grads[:, coords].shape, jnp.float64)
        resid = resid + 10.0 * jnp.einsum("kop,o->kp", J[:, 0], jnp.ones(J.shape[2]))  # a part inside the active span
        cand = jnp.concatenate([X[3:4], X[:1] + 1e-3, jnp.array([[0.2, 0.7]])])
        got = np.asarray(fns.ortho_scores(particles, J, active, cand, resid))
        Jn, rn, Bn = np.asarray(J), np.asarray(resid), np.asarray(pursuit.atoms(model, particles, cand, coords))
    want = np.zeros(len(cand))
    for k in range(Jn.shape[0]):
        A = Jn[k][np.asarray(active) > 0].reshape(-1, Jn.shape[-1]).T  # (P, active atoms)
        for c in range(len(cand)):
            Bc = Bn[k, c].T
            Bp = Bc - A @ np.linalg.lstsq(A, Bc, rcond=None)[0]
            want[c] += np.sum((Bp @ np.linalg.lstsq(Bp, rn[k], rcond=None)[0]) ** 2)
    np.testing.assert_allclose(got, want, rtol=1e-6)
    assert np.all(got <= np.sum(rn**2) * (1 + 1e-9))  # a score never exceeds the residual


def test_top_candidates_are_distinct_and_best_first():
    with jax.enable_x64(True):
        model, particles, X, y, grads = _case(4, seed=60)
        cfg = pursuit.PursuitConfig(candidates=128, shortlist=16, radii=(0.004, 0.015))
        fns = pursuit._Functions(model, cfg, jnp.asarray(model.network_coordinates()))
        msg = pursuit._Message(fns, particles, grads, jax.random.key(2))
        # an earlier point in a corner: its clipped neighbours coincide
        z = jnp.concatenate([X[:3].at[0].set(jnp.array([1.0, 0.0])), jnp.full((1, 2), 0.5)])
        active = jnp.array([1.0, 1.0, 1.0, 0.0])
        _, resid, J = msg.all.fit_grow(z, active)
        top = np.asarray(pursuit._top_candidates(msg.all, msg.sobol, msg.gram_inv, msg.offsets, z, active, resid, J, 40))
        scores = np.asarray(msg.all.ortho_scores(J, active, jnp.asarray(top), resid))
        best = np.asarray(pursuit._best_candidate(msg.all, msg.sobol, msg.gram_inv, msg.offsets, z, active, resid, J))
    assert len(np.unique(top, axis=0)) == len(top) == 40
    assert np.all(np.diff(scores) <= 1e-12 * scores[0])
    np.testing.assert_array_equal(best, top[0])


def test_follow_resumes_from_known_points_and_validates_its_options():
    """Resuming at round 2 from round 1's true points (a close pair among
    them) gives round 2 and 3 as following from round 0 does (to 1e-4), and
    the known points stay put to round-off; bad start points, accept_growth
    below 1 are rejected with a clear error."""
    with jax.enable_x64(True):
        X = np.array(jax.random.uniform(jax.random.key(31), (6, 2), jnp.float64))
        X[1] = X[0] + np.array([1.5e-4, -1e-4])  # a close pair of queries, as BO makes near its optimum
        model, records, truths = _growing_records([3, 4, 5, 6], X=X)
        cfg = pursuit.PursuitConfig(candidates=1024, shortlist=64, swaps=12, exchange_steps=50, search_particles=None,
                                    converged_rtol=1e-6)
        steps = pursuit.pursuit_follow(model, records[2:], jax.random.key(0), cfg, pad=4, start=truths[1])
        assert [s.round for s in steps] == [2, 3]
        assert [name for name, _ in steps[0].result.history][0] == "grow"  # no search from scratch
        for s, X in zip(steps, truths[2:]):
            assert metrics.matched_rmse(s.result.X, X) < 1e-4
        np.testing.assert_allclose(steps[0].result.X[:4], truths[1], atol=1e-9)
        with pytest.raises(ValueError, match="start"):
            pursuit.pursuit_follow(model, records[2:], jax.random.key(0), cfg, start=np.zeros((4, 3)))
        with pytest.raises(ValueError, match="shrink"):  # more start points than the first record has
            pursuit.pursuit_follow(model, records[2:], jax.random.key(0), cfg, start=truths[3])
        with pytest.raises(ValueError, match="accept_growth"):
            pursuit.pursuit_follow(model, records, jax.random.key(0), cfg, accept_growth=0.5)
        with pytest.raises(ValueError, match="lm_floor"):
            pursuit.pursuit_follow(model, records, jax.random.key(0), cfg, lm_floor=-1.0)
        with pytest.raises(ValueError, match="reference"):  # a reference without start points
            pursuit.pursuit_follow(model, records, jax.random.key(0), cfg, reference=1e-20)
        with pytest.raises(ValueError, match="screen_iters"):
            pursuit.pursuit_follow(model, records, jax.random.key(0), cfg, screen_iters=0)
        with pytest.raises(ValueError, match="place_iters"):
            pursuit.pursuit_follow(model, records, jax.random.key(0), cfg, place_iters=-1)
        with pytest.raises(ValueError, match="max_step"):
            pursuit.pursuit_follow(model, records, jax.random.key(0), cfg, max_step=0.0)
        with pytest.raises(ValueError, match="repairs"):
            pursuit.pursuit_follow(model, records, jax.random.key(0), cfg, repair_candidates=0)
        with pytest.raises(ValueError, match="repair_bar"):
            pursuit.pursuit_follow(model, records, jax.random.key(0), cfg, repair_bar=float("nan"))


def test_grow_in_place_keeps_the_earlier_points_and_adds_the_best_candidate():
    """``_grow(move=False)`` (what the follow attacker does with a new round)
    leaves every earlier point bit for bit and puts the new one at the
    candidate :func:`_best_candidate` picks for the same residual (the oracle,
    called separately); ``move=True`` (a search from scratch) moves them."""
    with jax.enable_x64(True):
        model, particles, X, _, grads = _case(5, seed=80)
        cfg = pursuit.PursuitConfig(candidates=256, shortlist=32, search_particles=None)
        fns = pursuit._Functions(model, cfg, jnp.asarray(model.network_coordinates()))
        msg = pursuit._Message(fns, particles, grads, jax.random.key(0))
        search, search_inv, _ = msg.subset(3)
        z = jnp.full((6, 2), 0.5).at[:4].set(X[:4] + 0.01)  # earlier points slightly off, as a follow carries them
        before = (jnp.arange(6) < 4).astype(jnp.float64)
        _, resid, J = search.fit_grow(z, before)
        want = pursuit._best_candidate(search, msg.sobol, search_inv, msg.offsets, z, before, resid, J)
        z_in, active = pursuit._grow(msg, search, search_inv, z, before, [4], move=False)
        np.testing.assert_array_equal(np.asarray(z_in[:4]), np.asarray(z[:4]))
        np.testing.assert_array_equal(np.asarray(z_in[4]), np.asarray(want))
        np.testing.assert_array_equal(np.asarray(active), [1, 1, 1, 1, 1, 0])
        z_moved, _ = pursuit._grow(msg, search, search_inv, z, before, [4])
        assert float(jnp.max(jnp.abs(z_moved[:4] - z[:4]))) > 1e-6
        # by exact scores (the follow attacker's default): the first of _exact_candidates, earlier points untouched
        z_ex, _ = pursuit._grow(msg, search, search_inv, z, before, [4], move=False, exact=True)
        np.testing.assert_array_equal(np.asarray(z_ex[:4]), np.asarray(z[:4]))
        np.testing.assert_array_equal(np.asarray(z_ex[4]), np.asarray(pursuit._exact_candidates(search, msg.sobol, msg.offsets, z, before, 1)[0]))


def test_ridge_fit_by_qr_equals_a_stacked_least_squares_oracle():
    """``fit_coefficients`` (QR of the atoms stacked over the ridge) against
    numpy's least squares on the same stacked system, with a close pair of
    points (ill-conditioned atoms) and an empty slot."""
    with jax.enable_x64(True):
        model, particles, X, y, grads = _case(5, seed=70)
        coords = jnp.asarray(model.network_coordinates())
        X = X.at[1].set(X[0] + 1e-4)  # a close pair
        J = pursuit.atoms(model, particles, X, coords)
        target = grads[:, coords]
        active = jnp.array([1.0, 1.0, 1.0, 0.0, 1.0])
        for ridge in (1e-9, 1e-20):
            c, resid = pursuit.fit_coefficients(J, target, active, ridge)
            Jn, tn = np.asarray(J), np.asarray(target)
            for k in range(Jn.shape[0]):
                B = (Jn[k] * np.asarray(active)[:, None, None]).reshape(-1, Jn.shape[-1])
                lam = ridge * np.sum(B * B) / (4 * Jn.shape[2])
                A = np.concatenate([B.T, np.sqrt(lam) * np.eye(B.shape[0])])
                want = np.linalg.lstsq(A, np.concatenate([tn[k], np.zeros(B.shape[0])]), rcond=None)[0]
                np.testing.assert_allclose(np.asarray(c[k]).ravel(), want, atol=1e-6 * np.abs(want).max())
                np.testing.assert_allclose(np.asarray(resid[k]), tn[k] - B.T @ want, atol=1e-9 * np.abs(tn[k]).max())
            assert np.all(np.asarray(c)[:, 3] == 0.0)  # the empty slot


def test_follow_retries_then_confirms_a_right_first_candidate():
    """With a bar no round can pass (``accept=0`` and no earlier residual) the
    round retries; no rival beats its (right) first candidate, so it is
    confirmed and its own residual is the next reference (``accept_growth=2``
    times it is the next round's bar)."""
    with jax.enable_x64(True):
        model, records, truths = _growing_records([4, 5, 6])
        cfg = pursuit.PursuitConfig(candidates=1024, shortlist=64, swaps=12, exchange_steps=50, search_particles=None,
                                    converged_rtol=1e-6)
        steps = pursuit.pursuit_follow(model, records[1:], jax.random.key(0), cfg, pad=4, accept=0.0, retries=3,
                                       start=truths[0], lm_floor=0.0)
    first, second = steps
    assert [name for name, _ in first.result.history] == ["grow", "lm", "retry"]
    assert first.confirmed and first.reference == first.result.loss
    for s, X in zip(steps, truths[1:]):
        assert metrics.matched_rmse(s.result.X, X) < 1e-6
    # the next bar is 2x the confirmed residual (both at round-off here): kept, confirmed, or (a retry that moved
    # the points) the bar it missed
    assert second.reference == (second.result.loss if second.result.loss <= 2.0 * first.reference or second.confirmed
                                else 2.0 * first.reference)


@pytest.mark.heavy  # a pursuit attack
def test_relocate_puts_a_misplaced_earlier_point_back():
    """Oracle: the true points. One of six moved next to another one (as the
    follow attacker on the Branin run put a query into the other cluster;
    there the polish never moved it back): relocating (drop the cheapest
    point, place the best candidate alone, polish all) brings the set back
    to the truth. From the truth, revisiting keeps the truth."""
    with jax.enable_x64(True):
        model, particles, X, _, grads = _case(6, seed=90)
        cfg = pursuit.PursuitConfig(candidates=512, faces=64, search_particles=None)
        fns = pursuit._Functions(model, cfg, jnp.asarray(model.network_coordinates()))
        msg = pursuit._Message(fns, particles, grads, jax.random.key(0))
        active = jnp.array([1.0] * 6 + [0.0] * 2)
        truth = jnp.full((8, 2), 0.5).at[:6].set(X)
        far = truth.at[2].set(X[4] + 1e-3)
        loss0 = float(msg.all.loss_lm(far, active))
        z, loss, kept = pursuit._relocate(msg, far, active, loss0, 6, 4, 20, 50, 0.0, 0.02)
        z_t, loss_t, _ = pursuit._relocate(msg, truth, active, float(msg.all.loss_lm(truth, active)), 2, 2, 20, 50, 0.0,
                                           float("inf"))
    assert kept >= 1 and loss < 1e-6 * loss0
    assert metrics.matched_rmse(np.asarray(z[:6]), np.asarray(X)) < 1e-6
    assert np.all(np.asarray(z[6:]) == 0.5)  # free slots untouched
    assert metrics.matched_rmse(np.asarray(z_t[:6]), np.asarray(X)) < 1e-8


def _cluster_message(gap):
    """Six points (float64), the sixth ``gap`` from the fifth (a cluster), and the message of their GMLL gradient."""
    from pacd_jax.gp import GPData

    model, particles, X, _, _ = _case(6, seed=95)
    X = X.at[5].set(X[4] + gap / np.sqrt(2.0))
    size = 9
    y = jax.random.normal(jax.random.key(96), (6,), jnp.float64)
    y = (y - y.mean()) / y.std()
    data = GPData(jnp.zeros((size, 2)).at[:6].set(X), jnp.zeros((size,)).at[:6].set(y), jnp.arange(size) < 6)
    grads = gmll_grads(model, particles, data)
    cfg = pursuit.PursuitConfig(candidates=256, faces=16, search_particles=None)
    fns = pursuit._Functions(model, cfg, jnp.asarray(model.network_coordinates()))
    return X, pursuit._Message(fns, particles, grads, jax.random.key(0))


@pytest.mark.parametrize("gap", [0.2, 3e-4])
def test_exact_scores_equal_the_drop_of_the_exact_residual(gap):
    """Oracle: the exact (QR, ``ridge_lm``) relative residual with and without
    the candidate as an extra point; its score is ``1 - after / before``.
    With a new point ``gap`` from an earlier one (3e-4: inside a cluster, as
    BO queries near its optimum) the true point explains the whole residual
    and :func:`_exact_candidates` ranks it first among the box candidates."""
    with jax.enable_x64(True):
        X, msg = _cluster_message(gap)
        prog = msg.all
        z = jnp.full((8, 2), 0.5).at[:6].set(X)
        before, after = (jnp.arange(8) < 5).astype(jnp.float64), (jnp.arange(8) < 6).astype(jnp.float64)
        cand = jnp.concatenate([X[5:6], jax.random.uniform(jax.random.key(97), (3, 2), jnp.float64)])
        scores = np.asarray(prog.exact_scores(z, before, cand))
        base = float(prog.loss_lm(z, before))
        want = [1.0 - float(prog.loss_lm(z.at[5].set(x), after)) / base for x in cand]
        ranked = pursuit._exact_candidates(prog, jnp.concatenate([msg.sobol, X[5:6]]), msg.offsets, z, before, 3)
    np.testing.assert_allclose(scores, want, rtol=1e-6, atol=1e-9)
    assert scores[0] > 1.0 - 1e-9 and np.all(scores[1:] < 1.0 - 1e-6)
    np.testing.assert_array_equal(np.asarray(ranked[0]), np.asarray(X[5]))
    assert len(np.unique(np.asarray(ranked), axis=0)) == 3


def test_screen_by_placing_tells_the_right_candidate_by_its_placed_residual():
    """Oracle: the true points. The earlier five are exact; the new sixth
    query is 2e-3 from one of them (inside a cluster, as BO queries near
    its optimum). Placing each candidate alone brings the one 3e-4 off the
    query back to it, and every candidate that lands on the query leaves a
    residual a million times below those stuck elsewhere; the screening
    stops at the first candidate within ``good``."""
    with jax.enable_x64(True):
        X, msg = _cluster_message(2e-3)
        z = jnp.full((8, 2), 0.5).at[:5].set(X[:5])
        active = (jnp.arange(8) < 6).astype(jnp.float64)
        fresh = (jnp.arange(8) == 5).astype(jnp.float64)

        def placed(z_new):
            return pursuit._levenberg_marquardt(msg.all, z_new, active, 20, 0.0, movable=fresh)

        far = jax.random.uniform(jax.random.key(98), (3, 2), jnp.float64)
        near = X[5] + jnp.array([3e-4, -1e-4])
        cands = jnp.concatenate([far, near[None]])
        out = pursuit._screen_by_placing(placed, z, 5, cands, good=0.0)
        stopped = pursuit._screen_by_placing(placed, z, 5, cands, good=float("inf"))
    losses = [loss for loss, _, _ in out]
    assert [i for _, i, _ in out] == [0, 1, 2, 3] and len(stopped) == 1
    errors = [float(np.linalg.norm(np.asarray(z_try[5]) - np.asarray(X[5]))) for _, _, z_try in out]
    # a candidate placed onto the query leaves round-off; one stuck elsewhere leaves orders of magnitude more
    right = [e < 1e-8 for e in errors]
    assert right[3] and not all(right)
    assert max(l for l, r in zip(losses, right) if r) < 1e-6 * min(l for l, r in zip(losses, right) if not r)
    for _, _, z_try in out:
        np.testing.assert_array_equal(np.asarray(z_try[:5]), np.asarray(X[:5]))  # the earlier points stay
