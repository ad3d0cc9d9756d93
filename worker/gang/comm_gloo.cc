// worker/gang/comm_gloo.cc - the CPU backend of comm.h: gloo (the library
// PyTorch's CPU process group uses), the only C++ file of the worker.
//
// Owns: comm_new_cpu_store and the gloo slots of worker/gang/comm_backend.h
// (worker/gang/comm.c dispatches to them, and serves world size 1 without gloo),
// gloo's rendezvous Store implemented on the comm_store callbacks (as
// PyTorch's c10d implements it on its TCPStore), the reduce-scatter (the
// first half of gloo's ring all-reduce, on gloo's unbound buffers: see
// reduce_scatter_sum), and turning every C++ exception into -1 plus one
// line in err.
// Must not: implement other reduction algorithms (gloo's ring all-reduce
// and ring all-gather are used as they are), bind gloo buffers to a
// caller's pointer beyond one call (callers' buffers come and go, and gloo's
// pointer-bound algorithms would have to agree across ranks on when to be
// rebuilt), or let an exception cross into C.
//
// Per call, nothing is built that outlives it but the reduce-scatter's two
// receive segments (kept by the communicator, grown to the largest call's,
// at most 2 x 4 MiB): gloo's unbound buffers wrap a pointer for one call at
// no cost and register nothing, and a sender writes once its peer has
// posted the receive, straight into the destination.
//
// Determinism: the ring all-reduce and the ring reduce-scatter add in an
// order fixed by rank and world size, so repeated runs with one world size
// are bit-identical.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/math.h>
#include <gloo/types.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>
#include <gloo/transport/unbound_buffer.h>

extern "C" {
#include "comm_backend.h"
#include "log.h"
}

namespace {

// gloo's Store on the caller's comm_store: set, get with a timeout, wait.
class CStore : public gloo::rendezvous::Store {
  public:
    CStore(const comm_store &s, double timeout_s) : s_(s), timeout_s_(timeout_s) {}

    void set(const std::string &key, const std::vector<char> &data) override
    {
        char err[512];
        if (s_.set(s_.ctx, key.c_str(), data.data(), data.size(), err, sizeof err) != 0)
            throw std::runtime_error(std::string("store set ") + key + ": " + err);
    }

    std::vector<char> get(const std::string &key) override { return fetch(key, timeout_s_); }

    void wait(const std::vector<std::string> &keys) override { wait(keys, timeout()); }

    void wait(const std::vector<std::string> &keys,
              const std::chrono::milliseconds &timeout) override
    {
        for (const auto &k : keys) fetch(k, timeout.count() / 1000.0);
    }

  private:
    std::chrono::milliseconds timeout() const
    {
        return std::chrono::milliseconds(static_cast<long>(timeout_s_ * 1000));
    }

    std::vector<char> fetch(const std::string &key, double timeout_s)
    {
        char err[512];
        void *val = nullptr;
        size_t len = 0;
        if (s_.get(s_.ctx, key.c_str(), timeout_s, &val, &len, err, sizeof err) != 0)
            throw std::runtime_error(std::string("store get ") + key + ": " + err);
        std::vector<char> out(static_cast<char *>(val), static_cast<char *>(val) + len);
        std::free(val);
        return out;
    }

    comm_store s_;
    double timeout_s_;
};

int communicators; // for store key prefixes: one per communicator of a process

// The rings' segments: a ring step moves one chunk per rank in segments of
// at most this many bytes, so that adding a received segment overlaps the
// transfer of the next (gloo's all-reduce takes the bound from
// AllreduceOptions::setMaxSegmentSize, 1 MiB by default). 4 MiB: measured
// at 2 ranks on 2 cores (bench/NOTES.md, issue 24), gloo's 1 MiB gave the
// all-reduce 4-9% more time by median and 17-23% by best time at 16-128
// MiB (each segment is a rendezvous of the two ranks' threads, and under
// load those wait for a core), and 16 MiB lost the overlap (20-45% less
// at 64 MiB under load); a size adapted to the message (chunk / 8 within
// 1-4 MiB) was no better.
constexpr size_t kSegmentBytes = 4u << 20;

// slot prefix of the reduce-scatter's messages: gloo's own collectives use
// 0x01-0x08 (gloo/types.h), so a tag never meets one of theirs
constexpr uint8_t kReduceScatterSlotPrefix = 0x56;

// a gloo communicator's state (struct comm's impl)
struct gloo_comm {
    uint32_t tag = 0;
    std::shared_ptr<gloo::rendezvous::Context> ctx;
    std::vector<float> segments; // the reduce-scatter's two receive segments
};

gloo_comm *state(comm *c) { return static_cast<gloo_comm *>(c->impl); }

int fail(comm *c, char *err, size_t errlen, const char *op, const std::exception &e)
{
    if (c) c->failed = 1;
    if (err && errlen)
        std::snprintf(err, errlen, "%s: peer lost or collective timed out (limit %.0f s): %s", op,
                      c ? c->timeout_s : 0.0, e.what());
    return -1;
}

size_t elem_bytes(comm_dtype t) { return t == COMM_BF16 ? 2 : 4; }

std::chrono::milliseconds timeout_of(const comm *c)
{
    return std::chrono::milliseconds(static_cast<long>(c->timeout_s * 1000));
}

// ---- the backend's slots (worker/gang/comm.c has checked count and failed) ----

void destroy(void *impl) { delete static_cast<gloo_comm *>(impl); }

int allreduce_sum(comm *c, float *buf, size_t count, char *err, size_t errlen)
{
    try {
        gloo::AllreduceOptions opts(state(c)->ctx);
        opts.setAlgorithm(gloo::AllreduceOptions::Algorithm::RING);
        opts.setMaxSegmentSize(kSegmentBytes);
        opts.setOutput(buf, count);
        opts.setReduceFunction(
            static_cast<void (*)(void *, const void *, const void *, size_t)>(&gloo::sum<float>));
        opts.setTag(state(c)->tag++);
        opts.setTimeout(timeout_of(c));
        gloo::allreduce(opts);
    } catch (const std::exception &e) {
        return fail(c, err, errlen, "all-reduce", e);
    }
    return 0;
}

// The reduce-scatter: gloo 0.5 (Debian's 2022 snapshot) has none in its
// unbound-buffer API, and its ReduceScatterHalvingDoubling binds the
// caller's pointer at construction (so it cannot be kept across calls
// whose buffers differ by rank), allocates and zeroes two scratch vectors
// the size of the whole buffer on every construction, adds each half only
// after all of it has arrived, and leaves the result at the start of the
// buffer. This is the reduce-scatter phase of gloo's ring all-reduce
// (gloo/allreduce.cc, ring()), on gloo's unbound buffers: world - 1 steps;
// at step s rank r sends chunk r - s - 1 (its partial sum so far) to rank
// r + 1 and adds chunk r - s - 2 from rank r - 1 into its own, so that after
// the last step chunk r holds the sum of every rank's, in place. Each
// chunk moves in segments received into two buffers in turn: segment i + 1
// arrives while segment i is added.
int reduce_scatter_sum(comm *c, float *buf, size_t count, char *err, size_t errlen)
{
    gloo_comm *g = state(c);
    const int n = c->world, r = c->rank;
    const size_t max_seg = kSegmentBytes / sizeof(float);
    // at least two segments per chunk: a chunk's segment is sent on at the
    // next step only once it has been added (two ops later)
    const size_t nseg = std::max<size_t>(2, (count + max_seg - 1) / max_seg);
    const size_t seg = (count + nseg - 1) / nseg;
    if (g->segments.size() < 2 * seg) {
        try {
            g->segments.clear();
            g->segments.shrink_to_fit();
            g->segments.resize(2 * seg);
        } catch (const std::bad_alloc &) {
            std::snprintf(err, errlen, "reduce-scatter: out of memory for its %zu-byte receive "
                          "buffers", 2 * seg * sizeof(float));
            return -1;
        }
    }
    try {
        float *tmp_ptr = g->segments.data();
        auto out = g->ctx->createUnboundBuffer(buf, count * static_cast<size_t>(n) * sizeof(float));
        auto tmp = g->ctx->createUnboundBuffer(tmp_ptr, 2 * seg * sizeof(float));
        const auto slot = gloo::Slot::build(kReduceScatterSlotPrefix, g->tag++);
        const auto timeout = timeout_of(c);
        const int to = (r + 1) % n, from = (r + n - 1) % n;
        // op i: step i / nseg, segment i % nseg; sent (send) or received
        // (!send) chunk's elements [*off, *off + return value) of buf
        auto span = [&](size_t i, bool send, size_t *off) {
            const size_t step = i / nseg, k = i % nseg;
            const size_t chunk = (static_cast<size_t>(r) + static_cast<size_t>(n) * 2 - step -
                                  (send ? 1 : 2)) % static_cast<size_t>(n);
            const size_t lo = std::min(count, k * seg), hi = std::min(count, lo + seg);
            *off = chunk * count + lo;
            return hi - lo;
        };
        const size_t ops = static_cast<size_t>(n - 1) * nseg;
        for (size_t i = 0; i < ops + 2; i++) {
            if (i >= 2) { // op i - 2: add what arrived, and see its send off
                size_t off, len = span(i - 2, false, &off);
                if (len) {
                    tmp->waitRecv(timeout);
                    float *dst = buf + off;
                    const float *got = tmp_ptr + ((i - 2) & 1) * seg;
                    for (size_t j = 0; j < len; j++) dst[j] += got[j];
                }
                if (span(i - 2, true, &off)) out->waitSend(timeout);
            }
            if (i < ops) { // op i: post the receive first, then the send
                size_t off, len = span(i, false, &off);
                if (len)
                    tmp->recv(from, slot, (i & 1) * seg * sizeof(float), len * sizeof(float));
                if ((len = span(i, true, &off)) != 0)
                    out->send(to, slot, off * sizeof(float), len * sizeof(float));
            }
        }
    } catch (const std::exception &e) {
        return fail(c, err, errlen, "reduce-scatter", e);
    }
    return 0;
}

int allgather(comm *c, const void *in, void *out, size_t count, comm_dtype dtype, char *err,
              size_t errlen)
{
    const size_t eb = elem_bytes(dtype);
    char *mine = static_cast<char *>(out) + static_cast<size_t>(c->rank) * count * eb;
    try {
        if (in != mine) std::memmove(mine, in, count * eb);
        gloo::AllgatherOptions opts(state(c)->ctx);
        // no input: the output already holds this rank's chunk (in place)
        if (dtype == COMM_BF16)
            opts.setOutput(static_cast<uint16_t *>(out), count * c->world);
        else
            opts.setOutput(static_cast<float *>(out), count * c->world);
        opts.setTag(state(c)->tag++);
        opts.setTimeout(timeout_of(c));
        gloo::allgather(opts);
    } catch (const std::exception &e) {
        return fail(c, err, errlen, "all-gather", e);
    }
    return 0;
}

int broadcast(comm *c, void *buf, size_t count, comm_dtype dtype, int root, char *err,
              size_t errlen)
{
    try {
        gloo::BroadcastOptions opts(state(c)->ctx);
        if (dtype == COMM_BF16)
            opts.setOutput(static_cast<uint16_t *>(buf), count);
        else
            opts.setOutput(static_cast<float *>(buf), count);
        opts.setRoot(root);
        opts.setTag(state(c)->tag++);
        opts.setTimeout(timeout_of(c));
        gloo::broadcast(opts);
    } catch (const std::exception &e) {
        return fail(c, err, errlen, "broadcast", e);
    }
    return 0;
}

int barrier(comm *c, char *err, size_t errlen)
{
    try {
        gloo::BarrierOptions opts(state(c)->ctx);
        opts.setTag(state(c)->tag++);
        opts.setTimeout(timeout_of(c));
        gloo::barrier(opts);
    } catch (const std::exception &e) {
        return fail(c, err, errlen, "barrier", e);
    }
    return 0;
}

const comm_backend gloo_backend = {
    "gloo", destroy, allreduce_sum, reduce_scatter_sum, allgather, broadcast, barrier,
};

} // namespace

extern "C" int comm_new_cpu_store(comm **out, const comm_store *store, int rank, int world,
                                  double timeout_s, char *err, size_t errlen)
{
    *out = nullptr;
    if (world == 1) { // no gloo: worker/gang/comm.c serves it
        if (!(*out = comm_wrap(nullptr, nullptr, rank, world, timeout_s))) {
            std::snprintf(err, errlen, "communicator: out of memory");
            return -1;
        }
        return 0;
    }
    gloo_comm *g = new (std::nothrow) gloo_comm;
    if (!g) {
        std::snprintf(err, errlen, "communicator: out of memory");
        return -1;
    }
    try {
        CStore base(*store, timeout_s);
        gloo::rendezvous::PrefixStore prefixed("comm/" + std::to_string(communicators++), base);
        gloo::transport::tcp::attr attr;
        const char *host = std::getenv("VITJOB_COMM_HOST");
        char name[256] = "";
        if (host && *host) {
            attr.hostname = host;
        } else if (gethostname(name, sizeof name - 1) == 0) {
            attr.hostname = name;
        }
        auto dev = gloo::transport::tcp::CreateDevice(attr);
        g->ctx = std::make_shared<gloo::rendezvous::Context>(rank, world);
        g->ctx->setTimeout(
            std::chrono::milliseconds(static_cast<long>(timeout_s * 1000)));
        g->ctx->connectFullMesh(prefixed, dev);
    } catch (const std::exception &e) {
        std::snprintf(err, errlen, "communicator: rank %d of %d could not connect to its peers "
                      "within %.0f s: %s", rank, world, timeout_s, e.what());
        delete g;
        return -1;
    }
    comm *c = comm_wrap(&gloo_backend, g, rank, world, timeout_s);
    if (!c) {
        delete g;
        std::snprintf(err, errlen, "communicator: out of memory");
        return -1;
    }
    LOG_INFO("comm", "event=connected backend=gloo rank=%d world=%d timeout_s=%.0f", rank, world,
             timeout_s);
    *out = c;
    return 0;
}
