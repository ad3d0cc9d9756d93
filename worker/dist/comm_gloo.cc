// worker/dist/comm_gloo.cc - the CPU backend of comm.h: gloo (the library
// PyTorch's CPU process group uses), the only C++ file of the worker.
//
// Owns: comm_new_cpu_store and the gloo slots of worker/dist/comm_backend.h
// (worker/dist/comm.c dispatches to them, and serves world size 1 without gloo),
// gloo's rendezvous Store implemented on the comm_store callbacks (as
// PyTorch's c10d implements it on its TCPStore), and turning every C++
// exception into -1 plus one line in err.
// Must not: implement reduction algorithms (gloo's ring all-reduce, its
// halving-doubling reduce-scatter and its all-gather are used), or let an
// exception cross into C.
//
// Determinism: the ring all-reduce and the halving-doubling reduce-scatter
// add in an order fixed by rank and world size, so repeated runs with one
// world size are bit-identical.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/math.h>
#include <gloo/reduce_scatter.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>

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

// a gloo communicator's state (struct comm's impl)
struct gloo_comm {
    uint32_t tag = 0;
    std::shared_ptr<gloo::rendezvous::Context> ctx;
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

// ---- the backend's slots (worker/dist/comm.c has checked count and failed) ----

void destroy(void *impl) { delete static_cast<gloo_comm *>(impl); }

int allreduce_sum(comm *c, float *buf, size_t count, char *err, size_t errlen)
{
    try {
        gloo::AllreduceOptions opts(state(c)->ctx);
        opts.setAlgorithm(gloo::AllreduceOptions::Algorithm::RING);
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

int reduce_scatter_sum(comm *c, float *buf, size_t count, char *err, size_t errlen)
{
    if (count * static_cast<size_t>(c->world) > static_cast<size_t>(INT32_MAX)) {
        std::snprintf(err, errlen, "reduce-scatter: %zu elements per rank x %d ranks is over "
                      "gloo's 2^31 - 1", count, c->world);
        return -1;
    }
    try {
        // gloo's halving-doubling reduce-scatter works in place on the whole
        // vector and leaves this rank's chunk of the sum at the START of the
        // buffer (it compacts what it receives from offset 0); move it to
        // this rank's own offset, where the interface promises it
        std::vector<int> recv(static_cast<size_t>(c->world), static_cast<int>(count));
        std::vector<float *> ptrs{buf};
        gloo::ReduceScatterHalvingDoubling<float> algo(
            state(c)->ctx, ptrs, static_cast<int>(count * c->world), recv);
        algo.run();
        if (c->rank != 0)
            std::memmove(buf + static_cast<size_t>(c->rank) * count, buf, count * sizeof(float));
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
    if (world == 1) { // no gloo: worker/dist/comm.c serves it
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
