/**
 * The host's side of one worker: its channel, the requests in flight on it, and whether it keeps the
 * host alive.
 *
 * @module
 */

import type { ChildProof, WorkerProcess } from "./adapter.ts";
import { SpawnPoolError } from "./errors.ts";
import {
  decodeJson,
  decodeU32,
  Frame,
  FrameDecoder,
  type FrameType,
  type Hello,
  PROTOCOL_VERSION,
  ProtocolError,
} from "./frame.ts";
import { FrameWriter } from "./frame_writer.ts";
import { deliverFrame, type RequestChannel, type RequestSink } from "./request_sink.ts";
import { setTimer } from "./timer.ts";

/** How long a new worker may take to say hello. */
const HELLO_TIMEOUT_MS = 30_000;

/** Largest request id; ids run from 1 (0 is the channel's own) and then start over. */
const MAX_REQUEST_ID = 0xffff_ffff;

/** How long a dead worker's channel is still read for what the worker sent before it died. */
const DEAD_CHANNEL_READ_MS = 20;
/**
 * The least rest of a frame's payload a channel is offered to read into directly (its receiver's `readTarget`):
 * a shorter one is copied out of the channel's buffer, which may bring the frames after it in the same read.
 */
const DIRECT_READ_MIN_BYTES = 32 * 1024;

/** The host's handle on one worker process. */
export class WorkerHandle implements RequestChannel {
  /** The worker process. */
  readonly process: WorkerProcess;
  /** Resolves once the worker said hello; rejects if it does not. */
  readonly ready: Promise<Hello>;
  /** Requests completed by this worker. */
  completed = 0;
  #writer: FrameWriter;
  #requests = new Map<number, RequestSink>();
  /** The commands this worker runs that the host saw to be its children (WorkerProcess.vouch), by request id. */
  #children = new Map<number, ChildProof>();
  #lastId = 0;
  #maxId: number;
  #refs = 1; // held until hello, so a host awaiting `ready()` stays alive
  #closed: SpawnPoolError | undefined;
  /**
   * Spawned frames of the chunk being read, by request id, not yet handed over: each is vouched for and delivered at
   * the chunk's end, or before the next frame of its request (see {@linkcode WorkerHandle.#dispatch}).
   */
  #heldSpawned = new Map<number, Uint8Array>();
  /** The worker's process has exited (its channel may still hold what it sent before). */
  #processExited = false;
  /** Set by {@linkcode WorkerHandle.hostExiting}. */
  #hostExiting = false;
  #onClose: (handle: WorkerHandle, error: SpawnPoolError) => void;
  #rejectHello: (error: SpawnPoolError) => void = () => {};

  /**
   * Wraps a started worker; `onClose` is called once when its channel closes. `timer` sets the hello's deadline (the
   * host runtime's cheapest, `setTimeout` by default); `maxRequestId` is for tests of the id wrap.
   */
  constructor(
    process: WorkerProcess,
    onClose: (handle: WorkerHandle, error: SpawnPoolError) => void,
    { timer = setTimer, maxRequestId = MAX_REQUEST_ID }: {
      timer?: (ms: number, callback: () => void) => () => void;
      maxRequestId?: number;
    } = {},
  ) {
    this.process = process;
    this.#maxId = maxRequestId;
    this.#onClose = onClose;
    this.#writer = new FrameWriter(process.channel);
    let helloResolve!: (hello: Hello) => void;
    let helloReject!: (error: Error) => void;
    let helloDone = false;
    this.ready = new Promise<Hello>((resolve, reject) => {
      helloResolve = resolve;
      helloReject = reject;
    });
    this.ready.catch(() => {});
    const cancelHelloTimer = process.local ? undefined : timer(HELLO_TIMEOUT_MS, () => {
      this.#shutdown(new SpawnPoolError("ERR_WORKER_START", "Worker did not say hello in time"));
    });

    // Set before the channel starts: a channel may deliver the hello (and the worker's end) at once, from start().
    this.#rejectHello = (error) => {
      cancelHelloTimer?.();
      if (!helloDone) helloReject(error);
    };
    const decoder = new FrameDecoder((type, id, payload, lent) => {
      if (!helloDone) {
        if (type !== Frame.Hello) throw new ProtocolError("Worker spoke before saying hello");
        const hello = decodeJson(payload);
        if (hello.version !== PROTOCOL_VERSION) {
          throw new ProtocolError(
            `Worker speaks protocol version ${hello.version}, host speaks ${PROTOCOL_VERSION}`,
          );
        }
        if (hello.error !== undefined) {
          // A worker that cannot serve (a pool `cgroup` it cannot use) says why, and exits.
          const why = typeof hello.error === "string" ? hello.error.slice(0, 2000) : "no reason given";
          this.#shutdown(new SpawnPoolError("ERR_WORKER_START", `Worker ${process.pid} cannot start: ${why}`));
          return;
        }
        helloDone = true;
        cancelHelloTimer?.();
        this.#unref();
        helloResolve(hello as unknown as Hello);
        return;
      }
      this.#dispatch(type, id, payload, lent);
    }, { lent: process.channel.lendsChunks === true, allocate: process.channel.allocate });
    process.channel.start({
      readTarget: () => decoder.readTarget(DIRECT_READ_MIN_BYTES),
      data: (chunk) => {
        let failure: unknown;
        try {
          decoder.push(chunk);
        } catch (error) {
          failure = error;
        }
        try {
          // Also when the chunk broke the protocol: the commands it reported are known (and vouched for) before the
          // shutdown kills what this worker leaves behind. A Spawned whose request's next frame has begun arriving
          // (a large Exit split across reads) stays held for that frame, unless the chunk broke the protocol.
          this.#releaseSpawned(failure === undefined ? decoder.pendingId : undefined);
        } catch (error) {
          failure ??= error;
        }
        if (failure !== undefined) {
          this.#shutdown(
            new SpawnPoolError("ERR_PROTOCOL", `Worker ${process.pid} broke the protocol: ${message(failure)}`, {
              cause: failure,
            }),
          );
        }
      },
      close: (error) => {
        this.#shutdown(
          new SpawnPoolError(
            helloDone ? "ERR_WORKER_DIED" : "ERR_WORKER_START",
            helloDone
              ? `Worker ${process.pid} exited or closed its channel`
              : `Worker ${process.pid} exited before it was ready`,
            { cause: error },
          ),
        );
      },
    });
    // A worker whose process died must not wait long for its channel to close: a grandchild could hold it. What it
    // sent before it died is read first, for a moment (the channel's close comes after it): a command it reported
    // (Spawned) is then one the host knows, and kills.
    void process.exited.then(() => {
      this.#processExited = true;
      setTimeout(() => {
        this.#shutdown(
          new SpawnPoolError(
            helloDone ? "ERR_WORKER_DIED" : "ERR_WORKER_START",
            helloDone ? `Worker ${process.pid} exited` : `Worker ${process.pid} exited before it was ready`,
          ),
        );
      }, DEAD_CHANNEL_READ_MS);
    });
  }

  /** Requests in flight on this worker. */
  get inFlight(): number {
    return this.#requests.size;
  }

  /** Whether the worker's channel has closed. */
  get closed(): boolean {
    return this.#closed !== undefined;
  }

  /**
   * Registers a request and returns its id: the next one after the last, starting over at 1 past the largest,
   * and never one a request still in flight on this worker holds (a command can outlive four billion others).
   * `ref` says whether the request keeps the host alive.
   */
  begin(sink: RequestSink, ref: boolean): number {
    if (this.#requests.size >= this.#maxId) throw new RangeError("Every request id is in use");
    let id = this.#lastId;
    do id = id >= this.#maxId ? 1 : id + 1; while (this.#requests.has(id));
    this.#lastId = id;
    this.#requests.set(id, sink);
    if (ref) this.ref();
    return id;
  }

  /** Sends a frame for a request. */
  send(type: FrameType, id: number, payload?: Uint8Array | readonly Uint8Array[]): void {
    if (this.#closed === undefined) this.#writer.send(type, id, payload);
  }

  /** Takes one keep-alive reference. */
  ref(): void {
    if (this.#refs++ === 0 && !this.#closed) {
      this.process.ref();
      this.process.channel.ref();
    }
  }

  /** Drops one keep-alive reference. */
  unrefRequest(): void {
    this.#unref();
  }

  #unref(): void {
    if (--this.#refs === 0 && !this.#closed) {
      this.process.unref();
      this.process.channel.unref();
    }
  }

  /**
   * Gives up on a worker that stopped doing its job (`why`): it is killed, its commands with it (their process groups,
   * from the host), and its requests still in flight fail with ERR_WORKER_DIED; the pool replaces it.
   */
  abandon(why: string): void {
    this.#shutdown(new SpawnPoolError("ERR_WORKER_DIED", `Worker ${this.process.pid} ${why}; it was killed`));
  }

  /** Closes the channel; the worker kills its children and exits. In-flight requests fail with `error`. */
  close(error: SpawnPoolError): void {
    this.#shutdown(error);
  }

  /**
   * The host is exiting (its exit hook runs): when this worker goes, its requests still in flight are dropped without
   * a word (the pool still hears of the worker's end). In a process that exits nobody would hear either; where the runtime runs
   * callbacks after the hook (`deno test` ends each test file with its "unload" and goes on), a command killed with
   * its host must not surface as an uncaught error.
   */
  hostExiting(): void {
    this.#hostExiting = true;
  }

  /**
   * Hands a frame to its request. A Spawned frame is held until the end of the chunk it came in (of the chunk that
   * completes the next frame of its request, when that frame began in it), or until the next frame of its request: a
   * request whose Exit came in the same chunk (a short command's, which the native worker sends together, or a large
   * Exit that began in it) is complete, so nothing of its pid is kept to kill later and its vouch (a read of /proc,
   * 10-230 µs in the runtimes: the first read of a new pid's entry is the dear one) is skipped; it is still checked as
   * any pid (deliverFrame). Every other Spawned is vouched for before its request hears of its pid, as before.
   */
  #dispatch(type: number, id: number, payload: Uint8Array, lent: boolean): void {
    if (this.#heldSpawned.size > 0) {
      const held = this.#heldSpawned.get(id);
      if (held !== undefined) {
        this.#heldSpawned.delete(id);
        this.#deliver(Frame.Spawned, id, held, false, type !== Frame.Exit);
      }
    }
    if (type === Frame.Spawned && this.process.vouch !== undefined && this.#requests.get(id)?.pid === undefined) {
      this.#heldSpawned.set(id, payload.slice()); // a copy: the channel may reuse a lent payload's bytes
      return;
    }
    this.#deliver(type, id, payload, lent, true);
  }

  /**
   * Delivers the Spawned frames still held (see {@linkcode WorkerHandle.#dispatch}), each vouched for; but the one of
   * request `keep`, whose next frame is partly read (it is delivered with that frame, or vouched for on a shutdown).
   */
  #releaseSpawned(keep?: number): void {
    if (this.#heldSpawned.size === 0) return;
    const held = [...this.#heldSpawned].filter(([id]) => id !== keep);
    for (const [id] of held) this.#heldSpawned.delete(id);
    let failure: unknown;
    for (const [id, payload] of held) {
      try {
        this.#deliver(Frame.Spawned, id, payload, false, true);
      } catch (error) {
        failure ??= error;
      }
    }
    if (failure !== undefined) throw failure;
  }

  /**
   * Hands a frame to its request, once {@linkcode deliverFrame} has checked it against where the request is; a
   * Spawned frame's pid is vouched for first when `vouch` says so.
   */
  #deliver(type: number, id: number, payload: Uint8Array, lent: boolean, vouch: boolean): void {
    const sink = this.#requests.get(id);
    if (sink === undefined) throw new ProtocolError(`Frame of type ${type} for unknown request ${id}`);
    // Before the request hears of its pid: a worker that names a process not its child is not believed.
    const start = vouch && type === Frame.Spawned && sink.pid === undefined ? this.#vouch(id, payload) : undefined;
    if (deliverFrame(sink, type, id, payload, lent, this.process.pid)) {
      this.#requests.delete(id);
      this.#children.delete(id);
      this.completed++;
      return;
    }
    if (start !== undefined) this.#children.set(id, { pid: sink.pid!, start, tree: sink.request.killTree === true });
  }

  /**
   * What the host can see of a command the worker reports (Spawned): its start time if it is the worker's child (proof
   * for a later kill of its group), undefined if that cannot be told; a live process that is not the worker's child
   * is a lie (a worker naming a stranger for the host to kill), a protocol error.
   */
  #vouch(id: number, payload: Uint8Array): string | undefined {
    if (payload.byteLength !== 4 || this.process.vouch === undefined) return undefined;
    const pid = decodeU32(payload);
    const start = this.process.vouch(pid);
    // Read after the worker died: its child has been re-parented, and nothing proves it was the worker's. Not a lie,
    // and not a process the host may signal either.
    if (start === false && this.#processExited) return undefined;
    if (start === false) {
      throw new ProtocolError(`Request ${id} names pid ${pid}, which is not a child of worker ${this.process.pid}`);
    }
    return start;
  }

  #shutdown(error: SpawnPoolError): void {
    if (this.#closed) return;
    // A Spawned held to the end of its chunk (a shutdown from within the chunk: a frame that broke the protocol, a
    // callback that closed the pool) is vouched for now, so that its command is among those killed below.
    try {
      this.#releaseSpawned();
    } catch {
      // a pid not believed is not killed
    }
    this.#closed = error;
    this.#rejectHello(error);
    this.process.channel.close();
    const sinks = [...this.#requests.values()];
    // A dead or broken worker cannot clean up after itself: its commands (except those meant to outlive it) are
    // killed here, with their process groups: those the host saw to be its children, and nothing else.
    const orphans = [...this.#children].flatMap(([id, child]) =>
      this.#requests.get(id)?.request.detached === true ? [] : [child]
    );
    this.#requests.clear();
    this.#children.clear();
    // A killTree command's tree is walked once the worker is gone for good (reaped): stopped while its worker was
    // still exiting, its process group would be orphaned with a stopped member, and the kernel's SIGHUP would end the
    // command before its tree (daemons in other sessions included) was read. Its group is killed after the walk.
    const trees = orphans.filter((child) => child.tree === true);
    const groups = trees.length === 0 ? orphans : orphans.filter((child) => child.tree !== true);
    if (groups.length > 0 || error.code !== "ERR_POOL_CLOSED") this.process.killOrphans(groups);
    if (trees.length > 0) void this.process.exited.then(() => this.process.killOrphans(trees));
    // A worker that broke the protocol or dropped its channel may still be running: it is done either way.
    if (error.code !== "ERR_POOL_CLOSED") this.process.kill("SIGKILL");
    if (!this.#hostExiting) { for (const sink of sinks) sink.onFail(error); }
    this.#onClose(this, error);
  }
}

function message(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}
