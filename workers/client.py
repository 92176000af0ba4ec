"""Client helpers shared by ``agentctl`` and Python users: connect, start, decide, follow.

Every helper takes a connected :class:`temporalio.client.Client` (see :func:`connect`), which uses
the pydantic data converter (with external payload storage, :mod:`workers.payloads.converter`) so
requests and results are the models of :mod:`workflows.models`.
"""

from __future__ import annotations

import asyncio
import time
import uuid
import weakref
from collections.abc import AsyncGenerator, Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Literal, TypeVar, cast

from temporalio.client import (
    Client,
    WorkflowHandle,
    WorkflowQueryFailedError,
    WorkflowUpdateFailedError,
)
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError, RPCStatusCode

from activities.signing import decision_message, sign_decision
from workers.config import Settings, load_settings, temporal_connect_config
from workers.listing import list_query as list_query
from workers.listing import list_runs as list_runs
from workers.payloads.converter import build_data_converter
from workers.run_memo import MEMO_INPUT_CHARS as MEMO_INPUT_CHARS
from workers.run_memo import MEMO_REQUEST as MEMO_REQUEST
from workers.run_memo import request_memo as request_memo
from workers.telemetry import temporal_plugins
from workflows.client_models import ToolResultAnswer, ToolResultUpdate
from workflows.view_models import WORKFLOW_NAME, RunResult, RunState

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    from activities.client_tools import ClientToolDef
    from workflows.agent_run import AgentRun
    from workflows.models import RunRequest
    from workflows.signals import ApproveSignal, DecideResult, DecideUpdate, RejectSignal

R = TypeVar("R")

# The run is addressed by its names (docs/contract.md), not through ``workflows.agent_run``: that
# module pulls in every step of the workflow, which a command such as ``agentctl status`` does not
# need (issue #35: an ``agentctl`` command answers in about 0.3 s). Each name below is the one the
# workflow's decorator gives (workflows/agent_run.py, handlers.py, approvals.py);
# tests/unit/test_light_imports.py checks that they match. For the same reason this module imports
# at the top only what reading a run needs (workflows/view_models.py, client_models.py), not
# workflows/models.py with the spec and the carried state: the models of the signals and of the
# decide update (workflows/signals.py), starting a run (workers/conversations.py) and following
# one are imported by the helpers that send, start or follow, when called.
QUERY_STATE = "state"
QUERY_TRANSCRIPT = "transcript"
UPDATE_DECIDE = "decide"
UPDATE_ADD_MESSAGE = "add_message"
UPDATE_TOOL_RESULT = "tool_result"
SIGNAL_APPROVE = "approve"
SIGNAL_REJECT = "reject"
SIGNAL_INTERRUPT = "interrupt"
SIGNAL_PAUSE = "pause"
SIGNAL_RESUME = "resume"
SIGNAL_SEND_MESSAGE = "send_message"


class ServerUnreachable(RuntimeError):
    """The Temporal server did not answer at the configured address."""


class ConnectionSettingsError(ValueError):
    """The connection settings cannot be used, e.g. a ``TEMPORAL_ADDRESS`` that is no host:port."""


async def connect(settings: Settings | None = None, **kwargs: Any) -> Client:
    """Connect to Temporal with the runtime's data converter (and tracing when configured).

    The converter is :func:`workers.payloads.converter.build_data_converter` (pydantic JSON plus
    external payload storage per ``AGENT_PAYLOAD_STORE``); a ``data_converter`` keyword overrides
    it. With ``AGENT_OTEL=otlp`` or ``console`` the SDK's ``OpenTelemetryPlugin`` is added to the
    client's ``plugins`` (see :mod:`workers.telemetry`); workers built from the client inherit it.

    Raises:
        ServerUnreachable: nothing answers at ``TEMPORAL_ADDRESS`` (message names the address).
        ConnectionSettingsError: the address (or another connection setting) is malformed.
        pydantic.ValidationError: an environment variable is invalid (:func:`load_settings`).
        workers.payloads.encryption.EncryptionKeyError: ``AGENT_ENCRYPTION_KEYS`` cannot be used.
        workers.telemetry.TelemetryUnavailableError: tracing is asked for but the OpenTelemetry
            packages are missing (message names the pip command).
    """
    settings = settings or load_settings()
    cfg = temporal_connect_config(settings)
    cfg.update(kwargs)
    if "data_converter" not in cfg:
        cfg["data_converter"] = build_data_converter(settings)
    tracing = temporal_plugins(settings, cfg.get("plugins") or ())
    if tracing:
        cfg["plugins"] = [*(cfg.get("plugins") or ()), *tracing]
    target = cfg.pop("target_host")
    try:
        return await Client.connect(target, **cfg)
    except ValueError as e:  # raised before any network use: the settings are wrong
        if "target" in str(e):
            raise ConnectionSettingsError(
                f"the Temporal address {target!r} (TEMPORAL_ADDRESS) cannot be used: "
                f"{_short_reason(e)}; expected host:port, e.g. 127.0.0.1:7233"
            ) from None
        raise ConnectionSettingsError(
            f"the Temporal connection settings (address {target!r}) cannot be used: "
            f"{_short_reason(e)}"
        ) from None
    except (RuntimeError, RPCError, OSError) as e:
        raise ServerUnreachable(
            f"cannot reach the Temporal server at {target} (namespace {cfg.get('namespace')}): "
            f"{_short_reason(e)}. Start one with `make dev-server` or set TEMPORAL_ADDRESS."
        ) from None


def _short_reason(e: BaseException) -> str:
    text = str(e)
    for marker, reason in (
        ("Connection refused", "connection refused"),
        ("timed out", "timed out"),
        ("dns", "name not resolved"),
    ):
        if marker.lower() in text.lower():
            return reason
    return text.splitlines()[0][:160] if text else type(e).__name__


_TRANSIENT = frozenset(
    {
        RPCStatusCode.UNAVAILABLE,
        RPCStatusCode.DEADLINE_EXCEEDED,
        RPCStatusCode.RESOURCE_EXHAUSTED,
        RPCStatusCode.ABORTED,
        RPCStatusCode.CANCELLED,
    }
)


SA_CHECK_TTL_S = 60.0
"""Seconds a client trusts a "registered" answer before asking the server again: starting runs
in a burst then costs one ``ListSearchAttributes`` call a minute, not one per run (bench
``peers``, docs/throughput.md). A "not registered" answer is never kept."""

_sa_registered_at: weakref.WeakKeyDictionary[Client, float] = weakref.WeakKeyDictionary()


async def search_attributes_registered(client: Client) -> bool:
    """True when the namespace has every search attribute the run sets (see temporal-dev.yml).

    False when the server says they are not there or will not list them (e.g. no operator
    service). A True answer is kept per client for :data:`SA_CHECK_TTL_S` seconds.

    Raises:
        temporalio.service.RPCError: the server did not answer (unavailable, restarting, timed
            out). Answering False then would start a run without search attributes, and such a
            run never sets them: it would stay invisible to ``AgentStatus`` filters for good
            (seen under ``make chaos`` when a run started while the server restarted).
    """
    seen = _sa_registered_at.get(client)
    if seen is not None and time.monotonic() - seen < SA_CHECK_TTL_S:
        return True
    from activities.search_attributes import namespace_has_search_attributes

    try:
        ok = await namespace_has_search_attributes(client)
    except RPCError as e:
        if e.status in _TRANSIENT:
            raise
        return False
    if ok:
        _sa_registered_at[client] = time.monotonic()
    return ok


async def start_run(
    client: Client,
    req: RunRequest,
    *,
    task_queue: str | None = None,
    workflow_id: str | None = None,
) -> WorkflowHandle[AgentRun, RunResult]:
    """Start ``AgentRun``; returns its handle. Workflow id ``run-<uuid4>`` unless given.

    Search attributes are set at start only when the namespace has them registered, with
    ``AgentStatus`` ``running`` (the run, revision 4 or later, then needs no upsert until something changes,
    docs/throughput.md); the run keeps them current from then on. The memo
    :data:`MEMO_REQUEST` holds the start of the request, for listings (a start-time field: no
    workflow command, no event of its own).
    """
    from workers.conversations import start_options

    task_queue = task_queue or load_settings().task_queue
    workflow_id = workflow_id or f"run-{uuid.uuid4()}"
    sa, opts = await start_options(client, req)
    h = await client.start_workflow(
        WORKFLOW_NAME,
        # the request goes as a plain RunRequest payload; run() is typed RawValue so that the
        # workflow gets it undecoded and decodes it itself (a bad input fails the run, not its task)
        req,
        result_type=RunResult,
        id=workflow_id,
        task_queue=task_queue,
        search_attributes=sa,  # None: the default (the namespace lacks them)
        **opts,
    )
    return cast("WorkflowHandle[AgentRun, RunResult]", h)


def handle(client: Client, run_id: str) -> WorkflowHandle[Any, RunResult]:
    """Handle of a run by its workflow id (the latest execution, across continue-as-new)."""
    return client.get_workflow_handle(run_id, result_type=RunResult)


async def result(client: Client, run_id: str) -> RunResult:
    """Wait for the run's result."""
    return await handle(client, run_id).result()


async def state(client: Client, run_id: str) -> RunState:
    """Query ``state``."""
    return await handle(client, run_id).query(QUERY_STATE, result_type=RunState)


async def wait_for_state(
    client: Client,
    run_id: str,
    predicate: Callable[[RunState], bool],
    *,
    timeout: float = 60.0,
    interval: float = 0.5,
) -> RunState:
    """Poll the ``state`` query every ``interval`` seconds until ``predicate(state)`` holds.

    For example ``lambda s: s.status == "awaiting_approval"``. A query that fails (the run has
    not had its first workflow task yet) is retried until ``timeout`` seconds have passed.

    Raises:
        TimeoutError: ``predicate`` did not hold within ``timeout`` (the message has the last
            status seen).
    """
    deadline = time.monotonic() + timeout
    last: RunState | None = None
    while time.monotonic() < deadline:
        try:
            last = await state(client, run_id)
            if predicate(last):
                return last
        except (RPCError, WorkflowQueryFailedError):
            pass
        await asyncio.sleep(interval)
    raise TimeoutError(
        f"run {run_id}: the expected state did not come within {timeout:.0f}s; "
        f"last status {last.status if last else None}"
    )


async def transcript(client: Client, run_id: str) -> list[dict[str, Any]]:
    """Query ``transcript``."""
    return await handle(client, run_id).query(QUERY_TRANSCRIPT, result_type=list[dict[str, Any]])


async def pending_call_ids(client: Client, run_id: str) -> list[str]:
    """Ids of the run's tool calls waiting for approval."""
    st = await state(client, run_id)
    return [p.tool_call_id for p in st.pending_approvals]


NOT_IN_HISTORY_RETRY_SECONDS = 10.0
"""How long :func:`decide` retries a decision refused as ``DecisionNotYetRecorded``."""


async def decide(
    client: Client,
    run_id: str,
    tool_call_id: str,
    decision: str,
    principal_id: str,
    *,
    arguments: dict[str, Any] | None = None,
    reason: str | None = None,
    comment: str | None = None,
    signer: Ed25519PrivateKey | None | Literal["local"] = "local",
    roles: Sequence[str] = (),
) -> DecideResult:
    """Approve or reject through the validated update ``decide``.

    ``roles`` are the decider's roles as their identity provider states them (the console passes
    the authenticated identity's); an approver ``role:NAME`` accepts a decision naming NAME.

    ``signer`` signs the decision (activities/signing.py) for runs whose spec requires signed
    decisions: ``"local"`` (the default) uses the key in ``<AGENT_STATE_DIR>/decision-key`` when
    it exists (:mod:`workers.decision_keys`), None sends it unsigned.

    A request the run made outside a workflow task (seen through a query on a worker that had to
    rebuild the run) is refused until it is in the run's history (workflows/approvals.py, revision 3);
    that refusal is retried for up to ``NOT_IN_HISTORY_RETRY_SECONDS`` (0.25 s apart).

    Raises:
        temporalio.client.WorkflowUpdateFailedError: unknown or stale call, or an unauthorised
            principal (the validator's message says which).
    """
    from workflows.signals import DecideResult, DecideUpdate

    upd = DecideUpdate(
        tool_call_id=tool_call_id,
        decision=decision,  # pyright: ignore[reportArgumentType] - a str from callers; pydantic validates the Literal
        principal_id=principal_id,
        arguments=arguments,
        reason=reason,
        comment=comment,
        roles=sorted(set(roles)),
    )
    _sign(upd, run_id, signer)
    return await _when_recorded(handle(client, run_id), UPDATE_DECIDE, upd, DecideResult)


def _sign(
    upd: DecideUpdate, run_id: str, signer: Ed25519PrivateKey | None | Literal["local"]
) -> None:
    """Set ``upd``'s ``signed_at`` and ``signature`` with ``signer`` (see :func:`decide`), if any."""
    if signer == "local":
        from workers.decision_keys import local_signer  # cryptography only if a key exists

        key = local_signer(load_settings().state_dir)
    else:
        key = signer
    if key is None:
        return
    upd.signed_at = datetime.now(UTC).isoformat()
    upd.signature = sign_decision(
        key,
        decision_message(
            run_id,
            upd.tool_call_id,
            upd.decision,
            upd.arguments if upd.decision == "approve" else None,
            upd.principal_id,
            upd.signed_at,
            upd.roles,
        ),
    )


async def _when_recorded(
    h: WorkflowHandle[Any, RunResult], name: str, upd: Any, result_type: type[R]
) -> R:
    """Send update ``name`` to ``h``; a ``DecisionNotYetRecorded`` refusal is retried 0.25 s apart.

    Retries for up to :data:`NOT_IN_HISTORY_RETRY_SECONDS`, then re-raises that refusal.

    Raises:
        temporalio.client.WorkflowUpdateFailedError: any other refusal, at once.
    """
    deadline = asyncio.get_running_loop().time() + NOT_IN_HISTORY_RETRY_SECONDS
    while True:
        try:
            return await h.execute_update(name, upd, result_type=result_type)
        except WorkflowUpdateFailedError as e:
            from workflows.signals import DECISION_NOT_YET_RECORDED

            cause = e.cause
            not_yet = (
                isinstance(cause, ApplicationError) and cause.type == DECISION_NOT_YET_RECORDED
            )
            if not not_yet or asyncio.get_running_loop().time() > deadline:
                raise
        await asyncio.sleep(0.25)


async def tool_result(
    client: Client, run_id: str, upd: ToolResultUpdate | dict[str, Any]
) -> ToolResultAnswer:
    """Send update ``tool_result``: the result of a client tool's call (docs/tools.md).

    Raises:
        temporalio.client.WorkflowUpdateFailedError: refused (``ToolResultRefused``: unknown or
            finished call, bad payload, unauthorised principal; the message says which). A
            call published outside a workflow task is retried as for ``decide``.
    """
    return await _when_recorded(handle(client, run_id), UPDATE_TOOL_RESULT, upd, ToolResultAnswer)


async def approve_signal(client: Client, run_id: str, sig: ApproveSignal) -> None:
    """Send signal ``approve`` (fire-and-forget)."""
    await handle(client, run_id).signal(SIGNAL_APPROVE, sig)


async def reject_signal(client: Client, run_id: str, sig: RejectSignal) -> None:
    """Send signal ``reject`` (fire-and-forget)."""
    await handle(client, run_id).signal(SIGNAL_REJECT, sig)


async def interrupt(
    client: Client, run_id: str, principal_id: str, reason: str = "interrupted"
) -> None:
    """Send signal ``interrupt``."""
    from workflows.signals import InterruptSignal

    await handle(client, run_id).signal(
        SIGNAL_INTERRUPT, InterruptSignal(reason=reason, principal_id=principal_id)
    )


async def pause(client: Client, run_id: str, principal_id: str) -> None:
    """Send signal ``pause``."""
    from workflows.signals import PrincipalSignal

    await handle(client, run_id).signal(SIGNAL_PAUSE, PrincipalSignal(principal_id=principal_id))


async def resume(client: Client, run_id: str, principal_id: str) -> None:
    """Send signal ``resume``."""
    from workflows.signals import PrincipalSignal

    await handle(client, run_id).signal(SIGNAL_RESUME, PrincipalSignal(principal_id=principal_id))


async def send_message(
    client: Client,
    run_id: str,
    content: str,
    principal_id: str,
    client_tools: list[ClientToolDef] | None = None,
) -> None:
    """Send signal ``send_message`` (``client_tools``: offered from this message on)."""
    from workflows.signals import MessageSignal

    sig = MessageSignal(content=content, principal_id=principal_id, client_tools=client_tools)
    await handle(client, run_id).signal(SIGNAL_SEND_MESSAGE, sig)


async def follow(
    client: Client,
    run_id: str,
    from_offset: int = 0,
    *,
    poll_cooldown: timedelta = timedelta(milliseconds=100),
) -> AsyncGenerator[dict[str, Any], None]:
    """The run's events (docs/contract.md "Event stream") from ``from_offset`` on, as they happen.

    Each item is the event's JSON object plus ``"offset"``, its position in the stream: after a
    disconnect, call again with ``from_offset=last["offset"] + 1`` and nothing is missed (unless
    the run truncated those items, see :mod:`workflows.events`; then it resumes at the oldest
    retained item). Follows continue-as-new; ends after ``run_finished``. On a finished run it
    drains the retained items (a worker must be up to answer the query).

    Args:
        client: a connected client (:func:`connect`).
        run_id: the run's workflow id.
        from_offset: the first offset wanted (0: from the start).
        poll_cooldown: least time between two polls once caught up (each poll is an Update, i.e.
            two events in the run's history when it returns items).

    Raises:
        temporalio.service.RPCError: no such run (``NOT_FOUND``) or the server is unreachable.
        temporalio.client.WorkflowUpdateFailedError: the run has no event stream (started by a
            worker older than the stream).
    """
    from temporalio.contrib.workflow_streams import WorkflowStreamClient

    from workflows.events import TOPIC as EVENTS_TOPIC

    stream = WorkflowStreamClient.create(client, run_id)
    async for item in stream.subscribe(
        [EVENTS_TOPIC], from_offset=from_offset, poll_cooldown=poll_cooldown
    ):
        event: dict[str, Any] = (
            dict(item.data) if isinstance(item.data, dict) else {"type": "unknown"}
        )
        event["offset"] = item.offset
        yield event
        if event.get("type") == "run_finished":
            return
