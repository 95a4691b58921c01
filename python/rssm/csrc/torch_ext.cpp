/*
 * The CPU and CUDA kernels of rssm::replayssm_decode, replayssm_materialise
 * and replayssm_advance, compiled against the torch of the process
 * (rssm/torch_ext.py builds and loads this file; docs/python.md, "The
 * compiled torch extension").
 *
 * The ops' schemas, their fake implementations and their Python
 * implementations stay in rssm/_torch_ops.py, which defines every schema
 * once; this file only adds kernels to ops defined there, and the
 * dispatcher checks nothing against a boxed kernel, so no schema is written
 * twice.
 *
 * A call is keyed by what the Python path's checks read (every tensor's
 * dtype, device, sizes and strides, the scalar arguments) and by the stream
 * it launches on. The first call of a key goes to the Python path (the op
 * rssm::_<op>_plan: rssm.replayssm.planned_decode, planned_materialise,
 * rssm.layer.planned_advance): it checks the call in full, runs it, and
 * returns where each pointer of the C call comes from. Later calls of the
 * key bind the tensors' addresses here and call rssm_layer_run,
 * rssm_layer_materialise or rssm_layer_advance, with no Python on the way.
 * A call that fails here (an address the kernels cannot take, rssm refusing
 * a row) is made again on the Python path, which raises the error the
 * Python path raises, so both paths say the same.
 *
 * The three C functions are looked up in the librssm the Python package
 * loaded (rssm_torch_ext_bind, dlopen with RTLD_NOLOAD), so the layer
 * objects the Python path creates are the ones this file runs.
 */
#include <dlfcn.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <type_traits>
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

/* The ops this file runs, in the order of kSpecs. */
enum Op { kDecode, kMaterialise, kAdvance, kOps };

/* An op's plan: the op that makes it (rssm/_torch_ops.py, which also
 * holds the schemas: a kernel reads its argument count from the schema it
 * is called with, whose first argument is a tensor on the device it runs
 * on), and the pointers it gives (those of rssm_layer_tensors, or of
 * rssm_layer_advance: slot_index, write_pos, force, cursor). */
struct Spec {
    const char *plan_op;
    size_t fields;
};

constexpr size_t kFields = 16; /* rssm_layer_tensors' pointers, the most a plan gives */
constexpr Spec kSpecs[kOps] = {
    {"rssm::_replayssm_decode_plan", kFields},
    {"rssm::_replayssm_materialise_plan", kFields},
    {"rssm::_replayssm_advance_plan", 4},
};
constexpr size_t kMaxPlans = 1024; /* as rssm._prepared.MAX_CALLS: past it the cache empties and refills */

static_assert(sizeof(rssm_layer_tensors) == kFields * sizeof(void *), "rssm_layer_tensors is 16 pointers");

/* The functions of the librssm the Python package loaded. */
struct Lib {
    decltype(&rssm_layer_run) run = nullptr;
    decltype(&rssm_layer_materialise) materialise = nullptr;
    decltype(&rssm_layer_advance) advance = nullptr;
};

/* Where one pointer of the C call comes from (rssm._prepared.Field):
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
    Lib lib;
    std::unordered_map<std::string, Plan> plans[kOps];
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

/* One argument as the key holds it: what the Python path's checks read of
 * it. The schema fixes each argument's kind, so only a missing optional
 * tensor needs a mark of its own (-1, where a tensor starts with its
 * dtype code, >= 0). */
void put_value(std::string &key, const c10::IValue &v)
{
    if (v.isTensor()) {
        const at::Tensor &t = v.toTensor();
        put(key, static_cast<int8_t>(t.scalar_type()));
        put(key, static_cast<int8_t>(t.layout()));
        put(key, static_cast<int8_t>(t.device().type()));
        put(key, static_cast<int8_t>(t.device().index()));
        put(key, static_cast<int8_t>(t.dim()));
        for (int64_t n : t.sizes())
            put(key, n);
        for (int64_t n : t.strides())
            put(key, n);
    } else if (v.isNone()) {
        put(key, int8_t{-1});
    } else if (v.isDouble()) {
        put(key, v.toDouble());
    } else if (v.isBool()) {
        put(key, v.toBool());
    } else if (v.isInt()) {
        put(key, v.toInt());
    } else {
        const std::string &str = v.toStringRef(); /* the schemas' other arguments are str */
        put(key, static_cast<uint32_t>(str.size()));
        key.append(str);
    }
}

/* What the Python path's plan depends on (the `args` arguments at `a`),
 * and the stream. */
std::string key_of(const c10::IValue *a, size_t args, int64_t stream)
{
    std::string key;
    key.reserve(1024);
    for (size_t i = 0; i < args; ++i)
        put_value(key, a[i]);
    put(key, stream);
    return key;
}

/* The call on a cached plan: true when rssm took it, false (nothing
 * launched) when an address does not fit or rssm refused it. */
bool run_plan(const Lib &lib, Op op, const Plan &p, const c10::IValue *a, void *stream)
{
    void *ptr[kFields] = {};
    for (size_t i = 0; i < kSpecs[op].fields; ++i) {
        const Field &f = p.fields[i];
        if (f.arg < 0)
            continue;
        const uintptr_t addr = reinterpret_cast<uintptr_t>(a[f.arg].toTensor().data_ptr()) + f.offset;
        if (addr % f.itemsize)
            return false;
        ptr[i] = reinterpret_cast<void *>(addr);
    }
    std::lock_guard<std::mutex> g(*p.calls);
    if (op == kAdvance)
        return lib.advance(p.layer, p.rows, static_cast<const int32_t *>(ptr[0]), static_cast<const int32_t *>(ptr[1]),
                           static_cast<const int32_t *>(ptr[2]), static_cast<int32_t *>(ptr[3]), stream,
                           nullptr) == RSSM_OK;
    rssm_layer_tensors t;
    std::memcpy(&t, ptr, sizeof t);
    if (op == kMaterialise)
        return lib.materialise(p.layer, p.rows, &t, stream, nullptr) == RSSM_OK;
    return lib.run(p.layer, p.rows, &t, stream, nullptr) == RSSM_OK;
}

/* The Python path for this call: checks it, runs it (or raises what the
 * Python path raises) and returns the plan to keep, empty when there is
 * none (a call whose arguments are converted, as rssm._prepared keeps none). */
std::vector<int64_t> python_path(Op op, const c10::IValue *a, size_t args, int64_t stream)
{
    static const c10::OperatorHandle ops[kOps] = {
        c10::Dispatcher::singleton().findSchemaOrThrow(kSpecs[kDecode].plan_op, ""),
        c10::Dispatcher::singleton().findSchemaOrThrow(kSpecs[kMaterialise].plan_op, ""),
        c10::Dispatcher::singleton().findSchemaOrThrow(kSpecs[kAdvance].plan_op, ""),
    };
    torch::jit::Stack s(a, a + args);
    s.emplace_back(stream);
    ops[op].callBoxed(&s);
    return s.back().toIntVector();
}

/* The op's call: its `args` arguments on top of `stack`. */
void call(Op op, size_t args, torch::jit::Stack *stack, void *stream)
{
    State &st = state();
    const size_t fields = kSpecs[op].fields;
    const c10::IValue *a = &*(stack->end() - args);
    const int64_t stream_value = static_cast<int64_t>(reinterpret_cast<intptr_t>(stream));
    std::string key = key_of(a, args, stream_value);
    Plan plan;
    Lib lib;
    bool found;
    {
        std::lock_guard<std::mutex> g(st.lock);
        auto it = st.plans[op].find(key);
        found = it != st.plans[op].end();
        if (found)
            plan = it->second;
        lib = st.lib;
        st.hits += found;
        st.misses += !found;
    }
    TORCH_CHECK(lib.run, "rssm: the torch extension is not bound to librssm (rssm.torch_ext.load binds it)");
    if (!found || !run_plan(lib, op, plan, a, stream)) {
        const std::vector<int64_t> r = python_path(op, a, args, stream_value);
        if (!found && r.size() == 2 + 3 * fields) {
            Plan p{};
            p.layer = reinterpret_cast<rssm_layer *>(static_cast<intptr_t>(r[0]));
            p.rows = static_cast<uint32_t>(r[1]);
            for (size_t i = 0; i < kFields; ++i)
                p.fields[i] = i < fields ? Field{r[2 + 3 * i], r[3 + 3 * i], r[4 + 3 * i]} : Field{-1, 0, 0};
            std::lock_guard<std::mutex> g(st.lock);
            auto &lock = st.layer_locks[p.layer];
            if (!lock)
                lock.reset(new std::mutex);
            p.calls = lock.get();
            if (st.plans[op].size() >= kMaxPlans)
                st.plans[op].clear();
            st.plans[op].emplace(std::move(key), p);
        }
    }
    torch::jit::drop(*stack, args);
}

/* The cpu backend takes no stream. */
template <Op op> void on_cpu(const c10::OperatorHandle &h, torch::jit::Stack *stack)
{
    call(op, h.schema().arguments().size(), stack, nullptr);
}

#ifdef RSSM_TORCH_CUDA
/* torch's current stream on the device of the op's first tensor: inside
 * torch.cuda.graph the capture stream, so a captured graph holds the launch. */
template <Op op> void on_cuda(const c10::OperatorHandle &h, torch::jit::Stack *stack)
{
    const size_t args = h.schema().arguments().size();
    const at::Tensor &x = (stack->end() - args)->toTensor();
    call(op, args, stack, c10::cuda::getCurrentCUDAStream(x.device().index()).stream());
}
#endif

/* The ops' Autograd kernel: straight below autograd. They return nothing
 * and write their outputs in place, so there is nothing to record, and
 * torch's fallback for an op without an Autograd kernel walks every
 * argument of every call looking for one that requires grad (part of the
 * host time docs/python.md gives). */
void below_autograd(const c10::OperatorHandle &op, c10::DispatchKeySet keys, torch::jit::Stack *stack)
{
    op.redispatchBoxed(keys & c10::after_autograd_keyset, stack);
}

constexpr const char *kNames[kOps] = {"replayssm_decode", "replayssm_materialise", "replayssm_advance"};

} /* namespace */

TORCH_LIBRARY_IMPL(rssm, Autograd, m)
{
    for (const char *name : kNames)
        m.impl(name, torch::CppFunction::makeFromBoxedFunction<&below_autograd>());
}

TORCH_LIBRARY_IMPL(rssm, CPU, m)
{
    m.impl(kNames[kDecode], torch::CppFunction::makeFromBoxedFunction<&on_cpu<kDecode>>());
    m.impl(kNames[kMaterialise], torch::CppFunction::makeFromBoxedFunction<&on_cpu<kMaterialise>>());
    m.impl(kNames[kAdvance], torch::CppFunction::makeFromBoxedFunction<&on_cpu<kAdvance>>());
}

#ifdef RSSM_TORCH_CUDA
TORCH_LIBRARY_IMPL(rssm, CUDA, m)
{
    m.impl(kNames[kDecode], torch::CppFunction::makeFromBoxedFunction<&on_cuda<kDecode>>());
    m.impl(kNames[kMaterialise], torch::CppFunction::makeFromBoxedFunction<&on_cuda<kMaterialise>>());
    m.impl(kNames[kAdvance], torch::CppFunction::makeFromBoxedFunction<&on_cuda<kAdvance>>());
}
#endif

/* The C entry points rssm/torch_ext.py calls through ctypes. */
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
    Lib lib;
    const char *missing = nullptr;
    auto find = [&](auto &fn, const char *name) {
        fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(h, name));
        if (!fn && !missing)
            missing = name;
    };
    find(lib.run, "rssm_layer_run");
    find(lib.materialise, "rssm_layer_materialise");
    find(lib.advance, "rssm_layer_advance");
    if (missing) {
        snprintf(message, size, "%s does not export %s", path, missing);
        return 1;
    }
    State &st = state();
    std::lock_guard<std::mutex> g(st.lock);
    st.lib = lib;
    return 0; /* the handle stays open: the layers live as long as the process */
}

/* Forgets every plan: rssm.clear_cache() destroys the layers they name. */
void rssm_torch_ext_forget(void)
{
    State &st = state();
    std::lock_guard<std::mutex> g(st.lock);
    for (auto &plans : st.plans)
        plans.clear();
}

/* Calls that found a plan, calls that went to the Python path, then the
 * plans kept of each op (decode, materialise, advance). */
void rssm_torch_ext_counts(uint64_t out[2 + kOps])
{
    State &st = state();
    std::lock_guard<std::mutex> g(st.lock);
    out[0] = st.hits;
    out[1] = st.misses;
    for (size_t op = 0; op < kOps; ++op)
        out[2 + op] = st.plans[op].size();
}
}
