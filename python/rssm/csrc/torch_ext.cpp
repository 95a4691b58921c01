/*
 * rssm::replayssm_decode's CPU and CUDA kernels, compiled against the torch
 * of the process (rssm/_torch_ext.py builds and loads this file;
 * docs/python.md, "The compiled torch extension").
 *
 * The op's schema, its fake implementation and the ops it does not
 * implement (materialise, advance) stay in rssm/_torch_ops.py, which
 * defines every schema once; this file only adds kernels to an op defined
 * there, and the dispatcher checks nothing against a boxed kernel, so no
 * schema is written twice.
 *
 * A call is keyed by what the Python path's checks read (every tensor's
 * dtype, device, sizes and strides, the scalar arguments) and by the stream
 * it launches on. The first call of a key goes to the Python path
 * (rssm.replayssm.planned_decode, through the op rssm::_replayssm_decode_plan):
 * it checks the call in full, runs it on the layer object of that stream,
 * and returns where each pointer of rssm_layer_tensors comes from. Later
 * calls of the key bind the tensors' addresses here and call rssm_layer_run,
 * with no Python on the way. A call that fails here (an address the kernels
 * cannot take, rssm refusing a row) is made again on the Python path, which
 * raises the error the Python path raises, so both paths say the same.
 *
 * rssm_layer_run is looked up in the librssm the Python package loaded
 * (rssm_torch_ext_bind, dlopen with RTLD_NOLOAD), so the layer objects the
 * Python path creates are the ones this file runs.
 */
#include <dlfcn.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <torch/library.h>
#ifdef RSSM_TORCH_CUDA
#include <c10/cuda/CUDAStream.h>
#endif

#include "rssm.h"

namespace {

/* The schema's arguments (rssm/_torch_ops.py): the first kArrays are the
 * tensors (mixed_qkv .. overflow, in rssm.replayssm._NAMES' order), then
 * scale, gate_kind, gate_mode, gate_lower_bound, use_qk_l2norm, ring_len,
 * max_rows, backend, padding. */
constexpr size_t kArgs = 23;
constexpr size_t kArrays = 14;
constexpr size_t kFields = 16; /* rssm_layer_tensors' pointers */
constexpr size_t kMaxPlans = 1024; /* as rssm._prepared.MAX_CALLS: past it the cache empties and refills */

static_assert(sizeof(rssm_layer_tensors) == kFields * sizeof(void *), "rssm_layer_tensors is 16 pointers");

using RunFn = decltype(&rssm_layer_run);

/* Where one pointer of rssm_layer_tensors comes from (rssm._prepared.Field):
 * argument `arg` (-1: NULL) at byte `offset`, an address that must be a
 * multiple of `itemsize`. */
struct Field {
    int64_t arg, offset, itemsize;
};

struct Plan {
    rssm_layer *layer;
    uint32_t rows;
    Field fields[kFields];
    std::mutex *calls; /* rssm.h: calls on one layer object must not overlap */
};

struct State {
    std::mutex lock;
    RunFn run = nullptr;
    std::unordered_map<std::string, Plan> plans;
    std::unordered_map<rssm_layer *, std::unique_ptr<std::mutex>> layer_locks;
    uint64_t hits = 0, misses = 0;
};

State &state()
{
    static State *s = new State; /* never destroyed: kernels may run during interpreter exit */
    return *s;
}

template <class T> void put(std::string &key, T v)
{
    key.append(reinterpret_cast<const char *>(&v), sizeof v);
}

void put_str(std::string &key, const std::string &s)
{
    put(key, static_cast<uint32_t>(s.size()));
    key.append(s);
}

/* What the Python path's plan depends on, and the stream. */
std::string key_of(const c10::IValue *a, int64_t stream)
{
    std::string key;
    key.reserve(768);
    for (size_t i = 0; i < kArrays; ++i) {
        if (a[i].isNone()) {
            put(key, int8_t{-1});
            continue;
        }
        const at::Tensor &t = a[i].toTensor();
        put(key, static_cast<int8_t>(t.scalar_type()));
        put(key, static_cast<int8_t>(t.layout()));
        put(key, static_cast<int8_t>(t.device().type()));
        put(key, static_cast<int8_t>(t.device().index()));
        put(key, static_cast<int8_t>(t.dim()));
        for (int64_t s : t.sizes())
            put(key, s);
        for (int64_t s : t.strides())
            put(key, s);
    }
    put(key, a[14].toDouble());
    put_str(key, a[15].toStringRef());
    put_str(key, a[16].toStringRef());
    put(key, a[17].toDouble());
    put(key, a[18].toBool());
    put(key, a[19].toInt());
    put(key, a[20].toInt());
    put_str(key, a[21].toStringRef());
    put_str(key, a[22].toStringRef());
    put(key, stream);
    return key;
}

/* The call on a cached plan: true when rssm_layer_run took it, false
 * (nothing launched) when an address does not fit or rssm refused it. */
bool run_plan(RunFn run, const Plan &p, const c10::IValue *a, void *stream)
{
    void *ptr[kFields];
    for (size_t i = 0; i < kFields; ++i) {
        const Field &f = p.fields[i];
        if (f.arg < 0) {
            ptr[i] = nullptr;
            continue;
        }
        const uintptr_t addr = reinterpret_cast<uintptr_t>(a[f.arg].toTensor().data_ptr()) + f.offset;
        if (addr % f.itemsize)
            return false;
        ptr[i] = reinterpret_cast<void *>(addr);
    }
    rssm_layer_tensors t;
    std::memcpy(&t, ptr, sizeof t);
    std::lock_guard<std::mutex> g(*p.calls);
    return run(p.layer, p.rows, &t, stream, nullptr) == RSSM_OK;
}

/* The Python path for this call: checks it, runs it (or raises what the
 * Python path raises) and returns the plan to keep, empty when there is
 * none (a call whose arguments are converted, as rssm._prepared keeps none). */
std::vector<int64_t> python_path(const c10::IValue *a, int64_t stream)
{
    static const c10::OperatorHandle op =
        c10::Dispatcher::singleton().findSchemaOrThrow("rssm::_replayssm_decode_plan", "");
    torch::jit::Stack s(a, a + kArgs);
    s.emplace_back(stream);
    op.callBoxed(&s);
    return s.back().toIntVector();
}

void decode(torch::jit::Stack *stack, void *stream)
{
    State &st = state();
    const c10::IValue *a = &*(stack->end() - kArgs);
    const int64_t stream_value = static_cast<int64_t>(reinterpret_cast<intptr_t>(stream));
    std::string key = key_of(a, stream_value);
    Plan plan;
    RunFn run;
    bool found;
    {
        std::lock_guard<std::mutex> g(st.lock);
        auto it = st.plans.find(key);
        found = it != st.plans.end();
        if (found)
            plan = it->second;
        run = st.run;
        st.hits += found;
        st.misses += !found;
    }
    TORCH_CHECK(run, "rssm: the torch extension is not bound to librssm (rssm._torch_ext.load binds it)");
    if (!found || !run_plan(run, plan, a, stream)) {
        const std::vector<int64_t> r = python_path(a, stream_value);
        if (!found && r.size() == 2 + 3 * kFields) {
            Plan p;
            p.layer = reinterpret_cast<rssm_layer *>(static_cast<intptr_t>(r[0]));
            p.rows = static_cast<uint32_t>(r[1]);
            for (size_t i = 0; i < kFields; ++i)
                p.fields[i] = Field{r[2 + 3 * i], r[3 + 3 * i], r[4 + 3 * i]};
            std::lock_guard<std::mutex> g(st.lock);
            auto &lock = st.layer_locks[p.layer];
            if (!lock)
                lock.reset(new std::mutex);
            p.calls = lock.get();
            if (st.plans.size() >= kMaxPlans)
                st.plans.clear();
            st.plans.emplace(std::move(key), p);
        }
    }
    torch::jit::drop(*stack, kArgs);
}

void decode_cpu(const c10::OperatorHandle &, torch::jit::Stack *stack)
{
    decode(stack, nullptr); /* the cpu backend takes no stream */
}

#ifdef RSSM_TORCH_CUDA
/* torch's current stream on the tensors' device: inside torch.cuda.graph the
 * capture stream, so a captured graph holds the launch. */
void decode_cuda(const c10::OperatorHandle &, torch::jit::Stack *stack)
{
    const at::Tensor &x = (stack->end() - kArgs)->toTensor();
    decode(stack, c10::cuda::getCurrentCUDAStream(x.device().index()).stream());
}
#endif

/* The op's Autograd kernel: straight below autograd. It returns nothing
 * and writes its outputs in place, so there is nothing to record, and
 * torch's fallback for an op without an Autograd kernel walks every
 * argument of every call looking for one that requires grad (part of the
 * host time docs/python.md gives). */
void decode_below_autograd(const c10::OperatorHandle &op, c10::DispatchKeySet keys, torch::jit::Stack *stack)
{
    op.redispatchBoxed(keys & c10::after_autograd_keyset, stack);
}

} /* namespace */

TORCH_LIBRARY_IMPL(rssm, Autograd, m)
{
    m.impl("replayssm_decode", torch::CppFunction::makeFromBoxedFunction<&decode_below_autograd>());
}

TORCH_LIBRARY_IMPL(rssm, CPU, m)
{
    m.impl("replayssm_decode", torch::CppFunction::makeFromBoxedFunction<&decode_cpu>());
}

#ifdef RSSM_TORCH_CUDA
TORCH_LIBRARY_IMPL(rssm, CUDA, m)
{
    m.impl("replayssm_decode", torch::CppFunction::makeFromBoxedFunction<&decode_cuda>());
}
#endif

/* The C entry points rssm/_torch_ext.py calls through ctypes. */
extern "C" {

/* Binds the extension to the librssm at `path`, which must be loaded in
 * this process already (by the Python package): 0, or 1 with a message. */
int rssm_torch_ext_bind(const char *path, char *message, size_t size)
{
    void *h = dlopen(path, RTLD_NOW | RTLD_NOLOAD);
    if (!h) {
        const char *why = dlerror();
        snprintf(message, size, "%s is not loaded in this process: %s", path, why ? why : "");
        return 1;
    }
    void *fn = dlsym(h, "rssm_layer_run");
    if (!fn) {
        snprintf(message, size, "%s does not export rssm_layer_run", path);
        return 1;
    }
    State &st = state();
    std::lock_guard<std::mutex> g(st.lock);
    st.run = reinterpret_cast<RunFn>(fn);
    return 0; /* the handle stays open: the layers live as long as the process */
}

/* Forgets every plan: rssm.clear_cache() destroys the layers they name. */
void rssm_torch_ext_forget(void)
{
    State &st = state();
    std::lock_guard<std::mutex> g(st.lock);
    st.plans.clear();
}

/* Calls that found a plan, calls that went to the Python path, plans kept. */
void rssm_torch_ext_counts(uint64_t out[3])
{
    State &st = state();
    std::lock_guard<std::mutex> g(st.lock);
    out[0] = st.hits;
    out[1] = st.misses;
    out[2] = st.plans.size();
}
}
