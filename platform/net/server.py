"""The broker's network loop: one asyncio TCP server per listener, speaking a framed protocol.

Each connection is served by one coroutine that reads a frame, hands the decoded request to the
dispatcher and writes the reply before reading the next frame, so pipelined requests are
answered in the order they were sent (the unread ones wait in the socket buffer, which is also
the back-pressure). An acks=all Produce waiting for its followers is the exception: the next
request is read meanwhile and the replies are written in order (:mod:`ember.net.pipelining`).
While a connection is idle, requests its protocol can answer at once (:attr:`BrokerServer.answer_now`)
are answered as they arrive, without waking the coroutine (:mod:`ember.net.immediate`).
Fetch payloads go out with ``loop.sendfile`` straight from segment files;
on a TLS listener they are read and written through the TLS transport instead (no zero-copy
there, as in Kafka: the bytes must be encrypted). A connection starts with
:func:`ember.security.listener.establish` (the TLS handshake, the connection's session); on a SASL
listener, requests go to :attr:`BrokerServer.authenticate` until the client has authenticated,
which bounds the whole exchange by ``sasl.handshake.timeout.ms`` and its frames by
``sasl.server.max.receive.size``, and closes the connection after a failure's response. A failed
authentication's response, and the close, wait Kafka's ``connection.failed.authentication.delay.ms``
on that connection's coroutine only (other connections are served meanwhile), and its log line is
rate-limited per (listener, user, mechanism, peer host), as ACL refusals are. With
``connections.max.reauth.ms`` the session expires: a SaslHandshake starts a re-authentication
(a new exchange, bounded the same way) and any other request but ApiVersions after expiry closes
the connection, as Kafka's brokers do (KIP-368).
A frame over ``socket.request.max.bytes``, a truncated header or a body that is not JSON is
logged and closes that connection only. So is a connection that takes longer than
``connections.max.idle.ms`` to start its next request, to send the rest of a started one (a client
stalled mid-frame, or a slow-loris trickling bytes) or to take a response off the broker's hands;
and a request still being handled when its client has gone is cancelled. With metrics on, an
observer (``ember.metrics.requests``) counts and times every request here, the one place all of
them pass.
"""
from __future__ import annotations

import asyncio
import logging
import os
import select
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Coroutine, cast

from ember.errors import EmberError
from ember.net.budget import RequestBudget
from ember.net.coalescing import CoalescingWriter
from ember.net.immediate import AnswerNow, ImmediateAnswers
from ember.net.pipelining import (
    MAX_REPLIES_OWED,
    ArrivalReader,
    OwedReply,
    RepliesInOrder,
    failed,
    handle_reading_on,
)
from ember.security.listener import ListenerSecurity, establish
from ember.security.log_limit import LogLimiter, suppressed_note
from ember.security.sasl.server import RawSaslToken, SaslServer
from ember.security.session import Session, current_session, enter_session
from ember.wire.api_keys import ApiKey
from ember.wire.frame import FRAME_LENGTH, Request, check_frame_size, decode_request, foreign_protocol, response_prefix
from ember.wire.reply import CloseConnection, FileRegion, Reply

if TYPE_CHECKING:
    from ember.metrics.requests import RequestObserver

log = logging.getLogger(__name__)

Dispatch = Callable[[Request], Coroutine[Any, Any, Reply | None]]
Authenticate = Callable[[Request, SaslServer, Dispatch], Awaitable[Reply | None]]


#: Bytes charged for an ember response's JSON body (small; its payload is counted exactly).
_RESPONSE_OVERHEAD = 1024
#: While a request is handled, how often the broker looks whether its client is still there.
CLIENT_CHECK_S = 1.0
_TIMER_SLACK_S = 0.001   # a timer may run this much before its time (the loop's clock resolution and rounding)
#: Frames above this are read in chunks of this size into a buffer of their own (:func:`_read_frame`).
LARGE_FRAME = 1 << 20
#: Bytes of a file region read per write on a TLS connection (bounds the memory of a large fetch).
TLS_CHUNK = 1 << 20
#: A failed authentication of the same (listener, user, mechanism, peer host) is logged at most
#: once per this period (a client with a wrong password may reconnect every ~150 ms).
FAILED_AUTHENTICATION_LOG_INTERVAL_S = 60.0

def client_host() -> str:
    """The requesting client's host as Kafka shows it ("/127.0.0.1"), from the connection's
    session (group members are described with the host they connect from, as Kafka does); ""
    outside a request."""
    session = current_session()
    return f"/{session.host}" if session is not None else ""


class _Watchdog:
    """Cancels a connection's task when its current step outlasts ``connections.max.idle.ms``
    (:meth:`arm`), or when its client goes away while a request is handled (:meth:`watch_client`:
    a long-poll fetch or a JoinGroup must not hold a dead client's connection for as long as it
    asked to wait); cancelling (not aborting the transport) also unwinds a ``sendfile`` cleanly.
    A step only notes when it falls due: one timer per connection fires at the earliest due time
    it has seen and, when the steps moved on meanwhile, sets itself for the current one. A busy
    connection's requests (four steps each) create no timer of their own: timers were a tenth of
    a small request's CPU on the Kafka listener (Spark's connector sends two ListOffsets per poll)."""

    def __init__(self, task: asyncio.Task[None], max_idle_ms: int) -> None:
        self._task = task
        self._loop = asyncio.get_running_loop()
        self._default = (max_idle_ms, f"connections.max.idle.ms={max_idle_ms}")
        self._limit = self._default
        self._step = ""
        self._watching: tuple[asyncio.StreamReader, asyncio.BaseTransport] | None = None  # else expiring
        self._armed = False
        self._due = 0.0          # loop time the current step expires, or its client is checked next
        self._generation = 0     # counts steps: an expiry due in a stalled loop turn checks it did not move on
        self._timer: asyncio.TimerHandle | None = None
        self.expired: str | None = None

    def arm(self, step: str, limit: tuple[int, str] | None = None) -> None:
        """Expire after ``connections.max.idle.ms``, or ``limit``: (milliseconds, the setting it
        comes from as the log line names it)."""
        self._step = step
        self._limit = limit or self._default
        self._watching = None
        self._due_in(self._limit[0] / 1000)

    def watch_client(self, reader: asyncio.StreamReader, transport: asyncio.BaseTransport) -> None:
        self._watching = (reader, transport)
        self._due_in(CLIENT_CHECK_S)

    def disarm(self) -> None:
        self._armed = False
        self._generation += 1

    def close(self) -> None:
        """Disarm for good (the connection ended): its timer goes too."""
        self.disarm()
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _due_in(self, seconds: float) -> None:
        self._armed = True
        self._generation += 1
        self._due = self._loop.time() + seconds
        if self._timer is None or self._timer.when() > self._due:
            if self._timer is not None:
                self._timer.cancel()
            self._timer = self._loop.call_at(self._due, self._fire)

    def _fire(self) -> None:
        self._timer = None
        if not self._armed:
            return
        if self._loop.time() < self._due - _TIMER_SLACK_S:    # the step moved on since: wait for the current one
            self._timer = self._loop.call_at(self._due, self._fire)
        elif self._watching is not None:
            self._check_client(*self._watching)
        else:
            # Expire one loop turn later: after the event loop was stalled (a busy broker), this timer
            # runs before the connection's task sees bytes that arrived in time; if the task moves on
            # meanwhile it re-arms or disarms, and the expiry sees that.
            self._loop.call_soon(self._expire_now, self._generation)

    def _expire_now(self, generation: int) -> None:
        if generation != self._generation:
            return
        self.expired = f"{self._step} took longer than {self._limit[1]}; the client may reconnect"
        self._task.cancel()

    def _check_client(self, reader: asyncio.StreamReader, transport: asyncio.BaseTransport) -> None:
        # EOF or a reset: nobody will read the answer. EOF counts even with pipelined frames still
        # unread in the buffer (``at_eof()`` waits for them to be read): a client that pipelined a
        # long-poll fetch and more requests, then closed, held its connection for the fetch's
        # whole max_wait (found by the Kafka fuzzer). StreamReader has no public "EOF received".
        # Once more than 128 KiB of pipelined frames wait in the reader, the transport stops reading
        # (asyncio's flow control), so it never sees the EOF: the socket itself is asked too. Such a
        # connection stayed in CLOSE_WAIT for as long as its request could wait (a DeleteTopics with a
        # 24-day timeout, say): the sockets the Kafka fuzzer found held after its run.
        if reader.exception() is not None or reader.at_eof() or getattr(reader, "_eof", False) \
                or _peer_closed(transport):
            self.expired = "the client went away while its request was being handled"
            self._task.cancel()
        else:
            self.watch_client(reader, transport)    # checked again in CLIENT_CHECK_S


#: poll() events of a socket whose peer closed (or shut down its sending side) or reset it. POLLRDHUP
#: (Linux) is reported however much unread data precedes the FIN.
_PEER_GONE = getattr(select, "POLLRDHUP", 0) | select.POLLHUP | select.POLLERR


def _peer_closed(transport: asyncio.BaseTransport) -> bool:
    """Whether the connection's peer has closed or reset it, even if the transport is not reading."""
    sock = transport.get_extra_info("socket")
    if sock is None or not _PEER_GONE & getattr(select, "POLLRDHUP", 0):
        return False
    try:
        poller = select.poll()
        poller.register(sock.fileno(), _PEER_GONE)
        return any(events & _PEER_GONE for _, events in poller.poll(0))
    except (OSError, ValueError):    # closed meanwhile
        return True


class BrokerServer:
    #: Turns a frame (without its length) into a request; the Kafka listener decodes its own.
    decode_frame = staticmethod(decode_request)
    #: The protocol the listener speaks, as named in log lines.
    protocol_name = "ember"
    #: Answers a request frame as it arrives, while the connection is idle, or None: the task
    #: handles it (:mod:`ember.net.immediate`). None: every request goes through the task.
    answer_now: AnswerNow | None = None
    #: Answers a request on a SASL listener before the client has authenticated: each protocol's
    #: server says how (``ember.protocol.ember.listener``, ``ember.protocol.kafka.listener``).
    authenticate: Authenticate

    def __init__(self, dispatch: Dispatch, host: str, port: int, max_frame_bytes: int,
                 max_idle_ms: int, observer: "RequestObserver | None" = None,
                 security: ListenerSecurity | None = None, budget: RequestBudget | None = None) -> None:
        self.dispatch = dispatch
        #: Bytes of request frames in flight, shared by the broker's listeners (queued.max.request.bytes).
        self.budget = budget or RequestBudget(-1)
        self.security = security or ListenerSecurity("EMBER")
        if self.security.sasl is not None and not hasattr(self, "authenticate"):
            raise TypeError(f"{type(self).__name__} cannot serve the SASL listener {self.security.listener}: "
                            f"it has no authenticate (use the protocol's server, e.g. EmberServer)")
        self.observer = observer
        self.host, self.port = host, port
        self.max_frame_bytes = max_frame_bytes
        self.max_idle_ms = max_idle_ms
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.Task[None]] = set()
        self._failed_authentications = LogLimiter(FAILED_AUTHENTICATION_LOG_INTERVAL_S)

    async def bind(self) -> None:
        """Bind the listening socket without accepting yet (see :meth:`start_serving`)."""
        loop = asyncio.get_running_loop()

        def connection() -> asyncio.StreamReaderProtocol:   # asyncio.start_server's, with an ArrivalReader
            return asyncio.StreamReaderProtocol(ArrivalReader(loop=loop), self._serve, loop=loop)

        self._server = await loop.create_server(connection, self.host, self.port, start_serving=False,
                                                reuse_address=True)

    async def start_serving(self) -> None:
        assert self._server is not None
        await self._server.start_serving()
        log.info("listening on %s:%d (%s)", self.host, self.port, self.security.protocol.value)

    async def close(self) -> None:
        if self._server is None:
            return
        self._server.close()
        for task in list(self._connections):
            task.cancel()
        await asyncio.gather(*self._connections, return_exceptions=True)
        await self._server.wait_closed()

    @property
    def connection_count(self) -> int:
        return len(self._connections)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        peer = writer.get_extra_info("peername")
        watchdog = _Watchdog(task, self.max_idle_ms)
        if isinstance(reader, ArrivalReader):
            reader.serve_here()
        pending: SaslServer | None = None
        drop_owed = False   # the connection ends on the client's side or by cancellation: nobody reads owed replies
        replies = CoalescingWriter(writer)   # replies to requests read ahead go out in one write
        owed = RepliesInOrder(lambda o, reply: self._write_owed(replies, o, reply), self._release_owed, task.cancel)
        try:
            session = await establish(self.security, writer, peer)
            if session is None:
                return
            enter_session(session)
            sasl = SaslServer(self.security.sasl) if self.security.sasl is not None else None
            immediate: ImmediateAnswers | None = None
            may_answer_now = self.answer_now is not None and isinstance(reader, ArrivalReader)
            while True:
                pending = sasl if sasl is not None and not sasl.complete else None
                if may_answer_now and not len(owed):
                    if immediate is None and (sasl is None or sasl.complete and sasl.expires_at is None):
                        immediate = self._immediate_answers(writer, replies, watchdog)   # in the session authenticated
                    if immediate is not None:
                        cast(ArrivalReader, reader).idle(immediate)
                read = await self._read_request(reader, watchdog, pending)
                if read is None:
                    drop_owed = True    # the client ended the stream
                    break
                request, charged = read
                timer = None
                try:   # the frame's bytes stay charged until its request is handled, then its response's
                    if pending is None and sasl is not None and sasl.expires_at is not None:
                        pending = self._renewal(sasl, request, session)
                        sasl = pending or sasl
                    produce = pending is None and request.api_key == ApiKey.PRODUCE
                    await self._wait_for_owed(owed, watchdog, MAX_REPLIES_OWED if produce else 1)
                    timer = self.observer.start(request.api_key) if self.observer is not None else None
                    watchdog.watch_client(reader, writer.transport)
                    if produce:
                        handling, later = await handle_reading_on(self.dispatch(request))
                        if (later or len(owed)) and not failed(handling):
                            watchdog.disarm()
                            owed.add(OwedReply(handling, request.correlation_id, charged, timer))
                            charged, timer = 0, None    # the reply's now, given back once it is written
                            continue
                        # a failed Produce: earlier replies first, then its failure ends the connection
                        await self._wait_for_owed(owed, watchdog, 1)
                        reply = handling.result()   # no wait: the task is done (failed, or nothing was owed)
                    else:
                        reply = await (self.dispatch(request) if pending is None
                                       else self._authenticate(request, pending))
                    watchdog.disarm()
                    if timer is not None:
                        timer.handled(reply)
                    correlation_id = request.correlation_id
                    del read, request   # the frame is freed before the response is written (nor kept while
                    if reply is not None:   # the next frame waits for room) ...
                        charged = self._charge_response(charged, reply)   # ... which is charged instead
                        watchdog.arm("writing a response")
                        await self._write(replies, correlation_id, reply)
                        watchdog.disarm()
                    reply = None    # a fetch's records are not held while the next request is awaited
                finally:
                    self.budget.release(charged)
                    if timer is not None:
                        timer.done()
                if pending is not None and pending.close_reason is not None:
                    raise CloseConnection(f"on listener {self.security.listener}: {pending.close_reason}")
        except EmberError as exc:
            log.warning("closing connection from %s: %s", peer, exc)
        except CloseConnection as exc:
            if pending is not None and pending.failed:
                self._log_failed_authentication(peer, pending)
            else:
                log.info("closing connection from %s: %s", peer, exc)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        except asyncio.CancelledError:
            drop_owed = True
            if watchdog.expired and pending is not None and pending.failed:   # the client left during the delay
                self._log_failed_authentication(peer, pending)
            elif watchdog.expired:
                log.info("closing connection from %s: %s", peer, watchdog.expired)
            elif owed.failure is not None:
                self._log_closing(peer, owed.failure)
        finally:
            watchdog.close()
            self._connections.discard(task)
            try:
                if len(owed) and not drop_owed:
                    await self._answer_owed(owed)
                await owed.close()
            finally:
                replies.flush()   # the replies still held go out before the close
                if watchdog.expired:
                    writer.transport.abort()   # close() would wait forever to flush to a client that does not read
                else:
                    writer.close()

    def _immediate_answers(self, writer: asyncio.StreamWriter, replies: CoalescingWriter,
                           watchdog: _Watchdog) -> ImmediateAnswers:
        """The connection's :class:`ImmediateAnswers` (its protocol has :attr:`answer_now`), created
        in its current context: on a SASL listener once the client has authenticated, and never
        when sessions expire (``connections.max.reauth.ms``: each request checks the expiry)."""
        assert self.answer_now is not None
        observer = self.observer

        def answered(frame: memoryview, started: float, reply: bytes) -> None:
            watchdog.arm("sending the next request")    # the client is active: it is not idle
            if observer is not None:
                timer = observer.start(int.from_bytes(frame[:2], "big"))    # api key: both protocols' first field
                timer.started = started
                timer.handled(reply)
                timer.done()
        return ImmediateAnswers(self.answer_now, writer.transport, lambda: replies.holding > 0, answered)

    @staticmethod
    async def _wait_for_owed(owed: RepliesInOrder, watchdog: _Watchdog, below: int) -> None:
        """Until fewer than ``below`` replies are owed, for at most ``connections.max.idle.ms``."""
        if len(owed) >= below:
            watchdog.arm("waiting for earlier requests to be answered")
            await owed.written(below)

    async def _answer_owed(self, owed: RepliesInOrder) -> None:
        """The broker ends the connection (a bad frame, an expired session) while Produces it read
        are still waiting for their followers: their appends stand, so their replies are still
        written, for at most ``connections.max.idle.ms``."""
        try:
            await asyncio.wait_for(owed.written(), self.max_idle_ms / 1000)
        except (asyncio.TimeoutError, asyncio.CancelledError):
            pass    # the connection ends all the same: what is still owed is cancelled next

    async def _write_owed(self, writer: CoalescingWriter, owed: OwedReply, reply: Reply | None) -> None:
        """Write a reply the connection owed (:mod:`ember.net.pipelining`), once its handler is done."""
        if owed.timer is not None:
            owed.timer.handled(reply)
        if reply is not None:
            owed.charged = self._charge_response(owed.charged, reply)
            await self._write(writer, owed.correlation_id, reply)

    def _release_owed(self, owed: OwedReply) -> None:
        self.budget.release(owed.charged)
        if owed.timer is not None:
            owed.timer.done()

    @staticmethod
    def _log_closing(peer: object, failure: BaseException) -> None:
        """Why a connection ends after an owed reply failed (its handler or its write)."""
        if isinstance(failure, EmberError):
            log.warning("closing connection from %s: %s", peer, failure)
        elif isinstance(failure, CloseConnection):
            log.info("closing connection from %s: %s", peer, failure)
        elif not isinstance(failure, (ConnectionError, asyncio.IncompleteReadError)):
            log.error("closing connection from %s: a reply failed", peer, exc_info=failure)

    def _charge_response(self, charged: int, reply: Reply) -> int:
        """Give back a handled request's frame bytes and charge its response's in-memory bytes (the
        file regions of an ember fetch go out with sendfile and are not held) while it is written:
        a client that does not read its responses holds what they really take, and new frames wait
        for room meanwhile. Charged without waiting (the response exists already); returns it."""
        size = len(reply) if isinstance(reply, (bytes, bytearray, memoryview)) else \
            sum(len(piece) for piece in reply) if isinstance(reply, tuple) else \
            _RESPONSE_OVERHEAD + sum(len(p) for p in reply.payload if not isinstance(p, FileRegion))
        self.budget.swap(charged, size)
        return size

    async def _authenticate(self, request: Request, sasl: SaslServer) -> Reply | None:
        """:attr:`authenticate`; when the authentication fails, its answer (or the close, after
        SaslHandshake v0) waits ``connection.failed.authentication.delay.ms`` on this connection's
        coroutine (Kafka's SocketServer delays the close likewise); it is below
        ``connections.max.idle.ms``, and the client watch still cancels the wait if the client goes."""
        try:
            reply = await self.authenticate(request, sasl, self.dispatch)
        except CloseConnection:
            await _failure_delay(sasl)
            raise
        await _failure_delay(sasl)
        return reply

    def _log_failed_authentication(self, peer: object, sasl: SaslServer) -> None:
        session = current_session()
        host = session.host if session is not None else str(peer)
        suppressed = self._failed_authentications.admit((self.security.listener, sasl.user, sasl.mechanism, host))
        if suppressed is not None:
            log.info("closing connection from %s: on listener %s: %s%s", peer, self.security.listener,
                     sasl.close_reason, suppressed_note(suppressed))

    def _renewal(self, sasl: SaslServer, request: Request, session: Session) -> SaslServer | None:
        """The re-authentication ``request`` starts (None: it is no SaslHandshake); raises
        CloseConnection when the session expired and ``request`` is not ApiVersions."""
        if request.api_key == ApiKey.SASL_HANDSHAKE:
            return sasl.reauthentication()
        if sasl.expired() and request.api_key != ApiKey.API_VERSIONS:
            raise CloseConnection(f"on listener {self.security.listener}: peer {session.peer}, principal "
                                  f"{sasl.principal}: session expired (connections.max.reauth.ms="
                                  f"{sasl.lifetime_ms}); the client did not re-authenticate")
        return None

    async def _read_request(self, reader: asyncio.StreamReader, watchdog: _Watchdog,
                            sasl: SaslServer | None = None) -> tuple[Request, int] | None:
        """The next request and the bytes charged for it to :attr:`budget` (the caller releases
        them once it is answered), None at a clean end of stream; raises EmberError on bad frames.
        The frame's bytes are charged before it is read: a frame that does not fit waits, reading
        nothing (back-pressure). The wait for the length prefix, for room in the budget and the
        read of the frame are each bounded by ``watchdog``;
        while ``sasl`` (an authentication in progress) is given, by what is left of its timeout,
        and frames by Kafka's ``sasl.server.max.receive.size``."""
        watchdog.arm("authenticating" if sasl is not None else "sending the next request", _sasl_limit(sasl))
        try:
            head = await reader.readexactly(FRAME_LENGTH.size)
        except asyncio.IncompleteReadError as exc:
            if exc.partial:
                raise
            return None
        (size,) = FRAME_LENGTH.unpack(head)
        limit = self.max_frame_bytes if sasl is None else min(self.max_frame_bytes, sasl.settings.max_receive_size)
        if size > limit and (foreign := foreign_protocol(head)) is not None:
            raise CloseConnection(self._foreign_reason(foreign))
        check_frame_size(size, limit)
        budget = self.budget
        if budget.limit > 0 and budget.in_flight and budget.in_flight + size > budget.limit:
            watchdog.arm(f"waiting for room for a request frame of {size} bytes (queued.max.request.bytes="
                         f"{budget.limit}, {budget.in_flight} in flight)", _sasl_limit(sasl))
        await budget.acquire(size)
        try:
            watchdog.arm(f"sending a request frame of {size} bytes", _sasl_limit(sasl))
            frame = await _read_frame(reader, size)
            request = RawSaslToken(frame) if sasl is not None and sasl.raw else self.decode_frame(frame)
        except BaseException:   # the connection ends: its part of the frame goes with the charge, not at the next GC
            _discard_buffered(reader)
            budget.release(size)
            raise
        return request, size  # type: ignore[return-value]

    def _foreign_reason(self, foreign: str) -> str:
        """Why a connection that opened with another protocol is closed, and what its client
        should have used instead."""
        listener, protocol = self.security.listener, self.security.protocol.value
        if foreign.startswith("a TLS"):
            return (f"{foreign} on {protocol} listener {listener}: the client uses TLS (security.protocol SSL or "
                    f"SASL_SSL); connect it to a TLS listener or set security.protocol={protocol}")
        return (f"{foreign} on listener {listener}, which speaks the {self.protocol_name} protocol: point that client "
                f"at the right port (metrics and health checks are served on metrics.listen)")

    async def _write(self, writer: CoalescingWriter, correlation_id: int, reply: Reply) -> None:
        try:
            writer.write(response_prefix(correlation_id, reply.body, reply.payload_size))
            for piece in reply.payload:
                if isinstance(piece, FileRegion):
                    writer.flush()   # what is held goes first (nothing may be written during a sendfile) ...
                    if writer.transport.is_closing():   # ... and may find the client gone: sendfile would raise
                        raise ConnectionResetError("the client closed the connection")
                    if self.security.uses_tls:
                        await _write_region(writer, piece)
                    else:
                        await asyncio.get_running_loop().sendfile(
                            writer.transport, piece.file, piece.position, piece.size)
                else:
                    writer.write(piece)
            await writer.drain()
        finally:
            reply.close()


async def _failure_delay(sasl: SaslServer) -> None:
    if sasl.failed and sasl.settings.failed_authentication_delay_ms > 0:
        await asyncio.sleep(sasl.settings.failed_authentication_delay_ms / 1000)


async def _read_frame(reader: asyncio.StreamReader, size: int) -> bytes:
    """A frame's ``size`` bytes. A large one is read in chunks into a buffer of its size, then
    copied once (twice its size at the peak): ``readexactly`` lets the reader's own buffer grow to
    the whole frame, copying it as it grows, and took three times a 100 MiB frame (+300 MB RSS) when
    the next frame was pipelined right behind it."""
    if size <= LARGE_FRAME:
        return await reader.readexactly(size)
    buffer = bytearray(size)
    got = 0
    with memoryview(buffer) as view:
        while got < size:
            chunk = await reader.read(min(size - got, LARGE_FRAME))
            if not chunk:
                raise asyncio.IncompleteReadError(b"", size)
            view[got:got + len(chunk)] = chunk
            got += len(chunk)
    return bytes(buffer)


def _discard_buffered(reader: asyncio.StreamReader) -> None:
    """Drop what a reader holds of a frame that will never be read whole (a client stalled or gone
    mid-frame, a cancelled read): up to ``socket.request.max.bytes``. Otherwise the bytes stay until
    the connection's objects are collected (a cancelled task's traceback keeps them in a cycle),
    after their charge was given back, and the next large frame is admitted on top of them."""
    buffered = getattr(reader, "_buffer", None)   # StreamReader has no public way to drop its buffer
    if isinstance(buffered, bytearray):
        buffered.clear()


def _sasl_limit(sasl: SaslServer | None) -> tuple[int, str] | None:
    """What is left of an authentication's time (None: no authentication in progress)."""
    return None if sasl is None else (sasl.remaining_ms(), f"sasl.handshake.timeout.ms={sasl.settings.timeout_ms}")


async def _write_region(writer: CoalescingWriter, region: FileRegion) -> None:
    """A file region through a TLS transport: read in chunks, each written once the previous drained."""
    fd, position, remaining = region.file.fileno(), region.position, region.size
    while remaining:
        chunk = os.pread(fd, min(remaining, TLS_CHUNK), position)
        if not chunk:
            raise CloseConnection(f"segment file ended {remaining} bytes before the fetched range")
        writer.write(chunk)
        position += len(chunk)
        remaining -= len(chunk)
        await writer.drain()
