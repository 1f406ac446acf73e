"""The SessionMemory controller: kopf handlers, thin and level-based, over pure decisions.

Where each part lives: ``registry.py`` the kopf wiring, ``reconcile.py`` (create, resume, spec change,
re-check), ``finalize.py`` (deletion), ``podwatch.py`` (the Pod watcher), ``health.py`` (the health poll),
``starting.py`` (the start deadline, waits without a Pod), ``lostnodes.py`` (lost nodes), ``writer.py``
(the one status write and its Events), ``record.py`` (what each step records), the pure decisions in
``ownership.py``, ``pod.py`` (the Pod builder), ``podview.py``, ``outcome.py``, ``derive.py``,
``waiting.py``, ``interruption.py`` and ``phases.py``, and the operator's memory in ``state.py`` and
``digest.py``.

One reconcile serves create, resume (operator restart), spec updates and a periodic re-check. It reads the
world, decides with pure functions, and converges; running it twice changes nothing the second time:

1. A Pod with the deterministic name of the session's attempt exists (``<name>-sandbox``; after n restarts
   ``<name>-sandbox-<n>``): adopt it if this SessionMemory owns it (controller owner reference with its
   uid); wait (``PreviousPodTerminating``) when an earlier SessionMemory of the same name left it; else
   refuse (``PodNameTaken``). If this SessionMemory had that Pod and it is gone, the session is over: an
   attempt never gets a second Pod. (A SessionMemory with no status yet, whose Pod the watcher has not seen,
   skips this read: the create in 3 answers 409 for a Pod that exists after all.)
2. Before any Pod, refusals, each a ``Failed`` phase whose ``Ready`` condition names the problem:
   an invalid spec (``InvalidSpec``), an older SessionMemory with the same ``sessionId`` in the namespace
   (``DuplicateSession``; ordered by creationTimestamp, then name; kopf keeps an index of sessions from
   its watch, so this check reads nothing from the API), a missing Secret or key
   (``SecretNotFound`` / ``SecretKeyNotFound``), a Secret the API forbids the operator to read
   (``SecretForbidden``): never start a session without its memory. Refusals are re-evaluated periodically
   (and on spec updates), so a session starts once the Secret appears or the older duplicate is gone.
3. Otherwise build the Pod (``pod.build_sandbox_pod``, pure) and create it; a 409 means it exists: read
   and adopt it as in 1. A ResourceQuota's or a LimitRange's refusal is a wait (``QuotaExceeded``,
   ``starting.py``: Pending, retried with a backoff until the start deadline). Any other create the API
   refuses (any 4xx ``kube.is_refusal`` counts as one: Pod Security, an invalid field) is the refusal
   ``PodRejected`` with the API's message, re-checked like the others (a namespace label may change).
   A transient answer (429, 5xx) is retried by kopf; so is the 403 of a ServiceAccount that does not exist (a
   namespace's ``default`` one appears moments after the namespace), but only for the configured
   ``service_account_wait`` since the first such answer: then it is the refusal ``ServiceAccountNotFound``.

The Pod watcher (by label, server-side selector) remembers each Pod event's state and derives the status
from the latest one with ``derive.derive_status`` and patches it: once per session however many events
arrived while it waited for a handler slot (``controller/coalescing.py``; the handler itself returns at
once, so kopf does not hold the Pod's body meanwhile). Every status write is a read-modify-write with a
resourceVersion precondition (retried on conflict) under a per-object lock, and posts a Kubernetes Event
when the phase (or the reason of a failure) changes. kopf does not retry event handlers, so a watcher write
that fails (an API hiccup) would be lost: the same periodic re-check therefore also checks every session
that has a Pod and no outcome yet against its Pod (level-based: it repairs a lost write or a missed event;
``recheck`` reads the Pod only, and starts from the SessionMemory as this process last wrote it), and the
watcher remembers each Pod's last state it saw, so a Pod that is gone is judged by what it last reported
(its termination messages), not as lost.

The same path that adopts a Pod (create, resume, the re-check) fails a session whose ``memsync-sync`` has
not started ``spec.sync.sidecarStartSeconds`` (else ``sidecar_start_timeout``) after the mount ended
(``outcome.sidecar_start_overdue``: ``SidecarNotStarted``, nothing ran so nothing was edited) and deletes its
Pod; the Pod's later end does not replace that verdict.

The same path fails a session whose sandbox has not run ``spec.startDeadlineSeconds`` (else
``start_deadline``) after its creation or latest restart (``StartTimeout``, naming what it waited for: the
scheduler's verdict, a quota, an image pull; its Pod deleted), and judges the Pod's node
(``lostnodes.py``): a node gone, out-of-service, or not Ready for ``node_lost_grace`` makes the session
``NodeLost`` (what the final flush could not do recorded), its Pod force-deleted after its grace period
when the operator runs with ``--force-delete-lost-pods``. With ``spec.onInterruption: Restart`` an
interrupted Pod's end (an eviction, a drain, a lost node's Pod gone) instead brings the session back to
``Pending`` (``Restarting``, ``status.restarts`` one higher, at most ``MAX_RESTARTS``) and the next attempt's
Pod is created at once.

Spec updates after a Pod exists cannot reach it (a Pod's containers and environment are immutable): the
operator records the new generation as observed, sets ``SpecApplied`` (False with a
``SpecChangeNotApplied`` warning unless the Pod was built from this very spec, by the hash it carries); the
change applies only to a new SessionMemory or a restart. ``sessionId`` and ``stores`` are immutable in the
CRD anyway.

memsync's finalizer stays only while the outcome is not recorded: kopf removes it once the status is final
(a refusal, re-checked, keeps it), so a finished SessionMemory never waits on the operator to go.

Deletion (memsync's own finalizer): the Pod is deleted with its own grace period so the sidecar's preStop
and SIGTERM flushes run; the handler re-checks until it is gone (bounded by the Pod's grace period plus
``delete_extra_seconds``; past the bound it warns ``FlushNotConfirmed``, records ``DeletionTimedOut`` and
releases), records the Pod's end from the last state the watcher saw (waiting briefly for the watcher's
DELETED event when it has not arrived yet; with no state at all the flush is recorded as not reported), and
releases the object.

While a session runs, a periodic job reads its sidecar's sync health (``/status`` at the Pod IP, see
``health.py``) and writes the ``Synced`` condition, ``lastSyncTime`` and the running totals
(``derive.health_status``), only when they changed.

Events (``controller/events.py``: through kopf inside a handler, through the API from the periodic jobs,
which run outside kopf's per-object workers) are posted for the SessionMemory on every phase change and
for PodCreated, PodAdopted (once per operator process), DeletingPod, FlushNotConfirmed,
SpecChangeNotApplied, LostPodForceDeleted, SyncFailing and SyncRecovered, and for each wait without a Pod.
Nothing here logs or posts a Secret's data: the Secret is read only to check that the key exists.
"""
