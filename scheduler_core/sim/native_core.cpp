// The simulator's per-op work in C++: the dispatch hook, the storage bookkeeping, the virtual
// timeline's span columns and the race detector. scheduler_core/sim/device.py drives it; its
// Python twin (``_OpRecorder``, ``SimDevice._on_op``, ``race.RaceDetector``, ``timeline.Timeline``)
// is the reference this file must match bit for bit, and the fallback where it cannot be built.
//
// Why by hand: torch reaches a Python dispatch mode for every aten op through a C++ -> Python round
// trip of several microseconds, more than a 64-wide model's ops cost themselves (docs/sim.md), and
// no library records ops with their storages, stacks and vector clocks. A boxed fallback on a mode
// key that no torch kernel uses, included in this thread's dispatch keys while a host step runs,
// sees the same ops the Python mode sees (under inference mode, nothing between the two keys
// decomposes an op) at a fraction of the cost.
#include <ATen/Parallel.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <c10/util/SmallVector.h>
#include <c10/util/flat_hash_map.h>
#include <torch/csrc/DynamicTypes.h>
#include <torch/csrc/autograd/python_variable.h>
#include <torch/csrc/jit/python/pybind_utils.h>
#include <torch/csrc/utils/pybind.h>
#include <torch/library.h>

#include <Python.h>
#include <frameobject.h>

#include <chrono>
#include <cmath>
#include <map>
#include <optional>
#include <stdexcept>
#include <memory>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

namespace py = pybind11;

namespace {

constexpr c10::DispatchKey kHookKey = c10::DispatchKey::TESTING_ONLY_GenericMode;
constexpr int kHost = 0;

// ------------------------------------------------------------------------------------------ stacks

// A captured Python stack, innermost first, up to the frame that entered the host step (code
// objects owned, with their last instruction offsets); the rest is that step's ``outer`` pairs,
// kept with the access (``device._stack``'s layout).
using Frames = c10::SmallVector<std::pair<PyObject*, int>, 12>;

// The calling thread's Python stack (the GIL held): the walk stops at ``entry``, as ``_stack`` does.
// Returns whether it reached ``entry`` (else it walked to the root).
bool capture_stack(PyObject* entry, Frames& frames) {
  PyFrameObject* frame = PyEval_GetFrame();  // borrowed
  Py_XINCREF(frame);
  while (frame != nullptr) {
    frames.emplace_back(reinterpret_cast<PyObject*>(PyFrame_GetCode(frame)), PyFrame_GetLasti(frame));
    if (reinterpret_cast<PyObject*>(frame) == entry) {
      Py_DECREF(frame);
      return true;
    }
    PyFrameObject* back = PyFrame_GetBack(frame);
    Py_DECREF(frame);
    frame = back;
  }
  return false;
}

// ---------------------------------------------------------------------------------- race detector

struct Access {
  int actor;
  int64_t epoch;
  const std::string* op;  // interned by the detector
  bool captured;  // ``frames`` and then ``stack``'s pairs; else ``stack`` is what Python passed
  Frames frames;
  py::object stack;
  Access(int actor, int64_t epoch, const std::string* op, bool captured, Frames&& frames, py::object stack)
      : actor(actor), epoch(epoch), op(op), captured(captured), frames(std::move(frames)), stack(std::move(stack)) {}
  Access(const Access&) = delete;
  ~Access() {  // the GIL is held wherever accesses go (every caller is Python or holds it)
    for (auto& frame : frames) Py_DECREF(frame.first);
  }
};
using AccessPtr = std::shared_ptr<const Access>;

struct BlockName {
  enum Kind { kKey, kLabel, kObject } kind = kKey;
  c10::SmallVector<int64_t, 5> shape;
  c10::ScalarType dtype = c10::ScalarType::Undefined;
  py::object object;
};

struct Block {
  BlockName name;
  int owner = 0;
  AccessPtr write;
  std::vector<std::pair<int, AccessPtr>> reads;  // the last read per actor, in first-read order
  std::vector<int> recorded;

  void read_by(int actor, const AccessPtr& access) {
    for (auto& entry : reads) {
      if (entry.first == actor) {
        entry.second = access;
        return;
      }
    }
    reads.emplace_back(actor, access);
  }
};

// Vector clocks and per-block access history: ``race.RaceDetector`` for integer keys (docs there).
class Detector {
 public:
  Detector(py::object format_stack, py::object hazard, py::object stack_factory, py::object label)
      : format_stack_(std::move(format_stack)), hazard_(std::move(hazard)),
        stack_factory_(std::move(stack_factory)), label_(std::move(label)) {
    names_.push_back("host");
    clocks_.push_back({0});
    seen_host_.push_back(0);
  }

  const std::string* intern(const std::string& text) { return &*strings_.insert(text).first; }

  int new_stream(const std::string& name) {
    names_.push_back(name);
    for (auto& clock : clocks_) clock.push_back(0);
    clocks_.emplace_back(names_.size(), 0);
    seen_host_.push_back(-1);
    return static_cast<int>(names_.size()) - 1;
  }

  void launch(int stream) {
    if (stream != kHost && seen_host_[stream] != host_version_) {
      join(stream, clocks_[kHost]);
      seen_host_[stream] = host_version_;
    }
  }

  std::vector<int64_t> record(int stream) {
    launch(stream);
    return clocks_[stream];
  }

  void wait_event(int stream, const std::vector<int64_t>& event) {
    claims_.erase(stream);
    launch(stream);
    join(stream, event);
  }

  void wait_stream(int stream, int other) {
    claims_.erase(stream);
    launch(stream);
    launch(other);
    join(stream, clocks_[other]);
  }

  void sync_event(const std::vector<int64_t>& event) { join(kHost, event); }

  void sync_stream(int stream) {
    launch(stream);
    join(kHost, clocks_[stream]);
  }

  void sync_device() {
    for (int stream = 1; stream < static_cast<int>(clocks_.size()); ++stream) sync_stream(stream);
  }

  void reads_done(int stream, const std::vector<int64_t>& event, const std::vector<int64_t>& keys, py::object stack) {
    auto record = std::make_shared<const Access>(stream, event.at(stream), intern("shared-read-done event recorded"),
                                                 false, Frames(), std::move(stack));
    auto& claimed = claims_[stream];
    for (int64_t key : keys) claimed[key] = record;
  }

  // One operation by ``actor``: ``fresh`` blocks are allocated by it and written first.
  void op(int actor, const std::string* name, c10::ArrayRef<int64_t> reads, c10::ArrayRef<int64_t> writes,
          bool captured, Frames&& frames, py::object stack, std::pair<int64_t, BlockName>* fresh, size_t fresh_count,
          py::list* found_out) {
    if (actor != kHost && seen_host_[actor] != host_version_) launch(actor);
    auto& clock = clocks_[actor];
    clock[actor] += 1;
    if (actor == kHost) host_version_ += 1;
    auto access = std::make_shared<const Access>(actor, clock[actor], name, captured, std::move(frames), std::move(stack));
    size_t before = found_.size();
    auto claimed = claims_.find(actor);
    if (claimed != claims_.end() && !claimed->second.empty()) {
      for (int64_t key : reads) {
        auto record = claimed->second.find(key);
        if (record != claimed->second.end()) {
          AccessPtr earlier = record->second;
          claimed->second.erase(record);  // one report per claim
          add_hazard("read-after-read-done", key, block(key, actor), *earlier, *access);
        }
      }
    }
    for (int64_t key : reads) {
      if (!writes.empty() && std::find(writes.begin(), writes.end(), key) != writes.end()) continue;
      Block& b = block(key, actor);
      const Access* last = b.write.get();
      if (last != nullptr && last->actor != actor && clock[last->actor] < last->epoch)
        add_hazard("read-after-write", key, b, *last, *access);
      b.read_by(actor, access);
      if (actor != b.owner) cross_.insert(key);
    }
    for (int64_t key : writes) {
      Block& b = block(key, actor);
      const Access* last = b.write.get();
      if (last != nullptr && last->actor != actor && clock[last->actor] < last->epoch)
        add_hazard("write-after-write", key, b, *last, *access);
      if (!b.reads.empty()) {
        for (auto& entry : b.reads) {
          const Access& other = *entry.second;
          if (other.actor != actor && clock[other.actor] < other.epoch)
            add_hazard("write-after-read", key, b, other, *access);
        }
        b.reads.clear();
      }
      b.write = access;
      if (actor != b.owner) cross_.insert(key);
    }
    for (size_t i = 0; i < fresh_count; ++i) {
      auto& [key, label] = fresh[i];
      Block& b = blocks_[key];
      b = Block();
      b.name = std::move(label);
      b.owner = actor;
      b.write = access;
      cross_.erase(key);
    }
    if (found_out != nullptr)
      for (size_t i = before; i < found_.size(); ++i) found_out->append(found_[i]);
  }

  void allocate(int64_t key, int actor, BlockName name) {
    Block& b = blocks_[key];
    b = Block();
    b.name = std::move(name);
    b.owner = actor;
    cross_.erase(key);
  }

  void name(int64_t key, py::object name) {
    Block& b = block(key, kHost);
    b.name = BlockName();
    b.name.kind = BlockName::kObject;
    b.name.object = std::move(name);
  }

  void record_stream(int64_t key, int stream) {
    Block& b = block(key, stream);
    if (std::find(b.recorded.begin(), b.recorded.end(), stream) == b.recorded.end()) b.recorded.push_back(stream);
  }

  // The host frees the block (``RaceDetector.free``): an unordered, unrecorded use by another
  // actor than its owner is a use-after-free.
  py::list free(int64_t key, const std::string& op, py::object stack) {
    py::list found;
    auto it = blocks_.find(key);
    bool had = it != blocks_.end();
    Block b;
    if (had) {
      b = std::move(it->second);
      blocks_.erase(it);
    }
    if (cross_.erase(key) == 0) return found;
    if (!had || b.owner == kHost) return found;
    const auto& owner_clock = clocks_[b.owner];
    const auto& host_clock = clocks_[kHost];
    std::vector<const Access*> users;
    for (auto& entry : b.reads) users.push_back(entry.second.get());
    if (b.write) users.push_back(b.write.get());
    for (const Access* use : users) {
      if (use->actor == b.owner || use->actor == kHost ||
          std::find(b.recorded.begin(), b.recorded.end(), use->actor) != b.recorded.end())
        continue;
      if (owner_clock[use->actor] >= use->epoch || host_clock[use->actor] >= use->epoch) continue;
      py::str owner(names_[b.owner]);
      std::string second = op + " (block returns to stream " + py::repr(owner).cast<std::string>() + "'s pool)";
      py::object hazard = hazard_(std::string("use-after-free"), block_name(key, b), *use->op, names_[use->actor],
                                  format(*use), second, names_[kHost], format_stack_(stack));
      found_.append(hazard);
      found.append(hazard);
    }
    return found;
  }

  bool crossed(int64_t key) const { return cross_.count(key) != 0; }
  const ska::flat_hash_set<int64_t>& cross() const { return cross_; }
  void forget(int64_t key) { blocks_.erase(key); }

  py::list hazards() const { return found_; }
  const std::vector<std::string>& names() const { return names_; }

 private:
  void join(int into, const std::vector<int64_t>& other) {
    auto& clock = clocks_[into];
    for (size_t i = 0; i < other.size(); ++i) {
      if (other[i] > clock[i]) {
        clock[i] = other[i];
        if (into == kHost) host_version_ += 1;
      }
    }
  }

  Block& block(int64_t key, int actor) {
    auto it = blocks_.find(key);
    if (it != blocks_.end()) return it->second;
    Block& b = blocks_[key];
    b.owner = actor;
    return b;
  }

  py::object format(const Access& access) const {
    if (access.captured) {
      py::list pairs;
      for (auto& [code, offset] : access.frames)
        pairs.append(py::make_tuple(py::reinterpret_borrow<py::object>(code), offset));
      return format_stack_(stack_factory_(pairs, access.stack));
    }
    return format_stack_(access.stack ? access.stack : py::tuple());
  }

  std::string block_name(int64_t key, const Block& b) const {
    switch (b.name.kind) {
      case BlockName::kLabel: {
        py::tuple shape(b.name.shape.size());
        for (size_t i = 0; i < b.name.shape.size(); ++i) shape[i] = py::int_(b.name.shape[i]);
        auto* dtype = reinterpret_cast<PyObject*>(torch::getTHPDtype(b.name.dtype));
        return py::str(label_(shape, py::reinterpret_borrow<py::object>(dtype)));
      }
      case BlockName::kObject:
        return py::str(b.name.object);
      default:
        return std::to_string(key);
    }
  }

  void add_hazard(const char* kind, int64_t key, const Block& b, const Access& first, const Access& second) {
    found_.append(hazard_(std::string(kind), block_name(key, b), *first.op, names_[first.actor], format(first),
                          *second.op, names_[second.actor], format(second)));
  }

  py::object format_stack_, hazard_, stack_factory_, label_;
  std::unordered_set<std::string> strings_;
  std::vector<std::string> names_;
  std::vector<std::vector<int64_t>> clocks_;
  std::vector<int64_t> seen_host_;
  int64_t host_version_ = 0;
  ska::flat_hash_map<int64_t, Block> blocks_;
  ska::flat_hash_set<int64_t> cross_;
  std::unordered_map<int, std::unordered_map<int64_t, AccessPtr>> claims_;
  py::list found_;
};

// ---------------------------------------------------------------------------------------- spans

// The virtual timeline's columns (``timeline.Timeline``'s storage): track and name as indices into
// one string table, start and end, and the host clock when each span was queued.
class Spans {
 public:
  explicit Spans(bool keep) : keep_(keep) {}

  uint32_t intern(const std::string& text) {
    auto it = index_.find(text);
    if (it != index_.end()) return it->second;
    uint32_t id = static_cast<uint32_t>(strings_.size());
    strings_.push_back(text);
    index_.emplace(text, id);
    return id;
  }

  void add(uint32_t track, uint32_t name, double start, double end) {
    if (track >= busy_slot_.size()) busy_slot_.resize(track + 1, -1);
    if (busy_slot_[track] < 0) {
      busy_slot_[track] = static_cast<int>(busy_.size());
      busy_.emplace_back(track, 0.0);
    }
    auto& busy = busy_[busy_slot_[track]].second;
    busy = busy + (end - start);
    if (!has_first_) {
      has_first_ = true;
      first_ = start;
    }
    if (keep_) {
      tracks_.push_back(track);
      names_.push_back(name);
      times_.push_back(start);
      times_.push_back(end);
      issued_.push_back(host_us);
    }
  }

  void add_named(const std::string& track, const std::string& name, double start, double end) {
    add(intern(track), intern(name), start, end);
  }

  py::dict busy() const {
    py::dict out;
    for (auto& [track, us] : busy_) out[py::str(strings_[track])] = us;
    return out;
  }

  py::object first() const { return has_first_ ? py::object(py::float_(first_)) : py::object(py::none()); }

  // ``_Queries.extent`` and ``idle_gaps`` over the columns, in the same order and arithmetic (so
  // the same doubles): run_reference asks both once per run, and building the Python columns for
  // them cost a toy run a twentieth of its time.
  std::pair<double, double> extent(const std::string& track, double issued_from) const {
    auto id = index_.find(track);
    bool found = false;
    double first = 0.0, last = 0.0;
    if (id != index_.end()) {
      for (size_t i = 0; i < tracks_.size(); ++i) {
        if (tracks_[i] != id->second || !(issued_[i] >= issued_from)) continue;
        double end = times_[2 * i + 1];
        if (!found) {
          found = true;
          first = times_[2 * i];
          last = end;
        } else if (end > last) {
          last = end;
        }
      }
    }
    if (!found) throw py::value_error("no work queued on '" + track + "' from " + py::str(py::float_(issued_from)).cast<std::string>() + " us");
    return {first, last};
  }

  double idle_gaps(const std::string& track, double start_us, double end_us) const {
    double busy = 0.0;
    auto id = index_.find(track);
    if (id != index_.end()) {
      for (size_t i = 0; i < tracks_.size(); ++i) {
        if (tracks_[i] != id->second) continue;
        double start = times_[2 * i], end = times_[2 * i + 1];
        double lo = start_us > start ? start_us : start, hi = end_us < end ? end_us : end;
        if (hi > lo) busy += hi - lo;
      }
    }
    double idle = end_us - start_us - busy;
    return idle > 0.0 ? idle : 0.0;
  }

  py::list column(const std::vector<uint32_t>& ids) const {
    py::list out(ids.size());
    std::vector<py::str> cache;
    cache.reserve(strings_.size());
    for (auto& text : strings_) cache.emplace_back(text);
    for (size_t i = 0; i < ids.size(); ++i) out[i] = cache[ids[i]];
    return out;
  }

  bool keep_;
  double host_us = 0.0;
  std::vector<std::string> strings_;
  std::unordered_map<std::string, uint32_t> index_;
  std::vector<uint32_t> tracks_, names_;
  std::vector<double> times_, issued_;
  std::vector<std::pair<uint32_t, double>> busy_;
  std::vector<int> busy_slot_;
  bool has_first_ = false;
  double first_ = 0.0;
};

// ----------------------------------------------------------------------------------- the recorder

// What the simulator needs to know of an op (``device._op_info``), once per process.
struct OpFacts {
  std::string name;
  bool skip = false;  // a view, or no device work
  std::vector<char> writes;  // per schema argument
  bool mutates = false;
  enum Kind { kPlain, kLinear, kAttention, kGather } kind = kPlain;
  bool view = false;  // its output aliases an input's memory: it reads no values
  bool python_flops = false;  // torch's FLOP formula, called in Python (none but linear is in C++)
  bool decomposes = false;  // autograd runs its CompositeImplicitAutograd kernel (not seen whole)
  PyObject* func = nullptr;  // the OpOverload, a reference held for the process's life
};

std::unordered_map<const void*, OpFacts> known_ops;  // by the op's schema (ops live forever)

// An op as one recorder knows it: its facts and its name interned by that run's detector and spans.
struct OpNames {
  const OpFacts* facts;
  const std::string* name;
  uint32_t span_name;
};

class Recorder;
thread_local Recorder* active = nullptr;

// ``SimDevice``'s per-op state and hot path (``_OpRecorder.__torch_dispatch__`` and ``_on_op``).
class Recorder {
  // Each block's storage, weakly (a dead one's address may be reused), and whether it is device
  // memory (``SimDevice._refs`` and ``_device_mem``).
  struct Tracked {
    c10::weak_intrusive_ptr<c10::StorageImpl> ref;
    bool device;
  };

 public:
  Recorder(Detector& detector, py::object detector_object, Spans& spans, py::object spans_object, py::dict ready,
           py::object op_facts, py::object linear, py::object flops, double matmul_rate, double vector_rate,
           double hbm_rate, double launch_us, bool prepacked_linear, bool measure_host)
      : detector_(detector), detector_object_(std::move(detector_object)), spans_(spans),
        spans_object_(std::move(spans_object)), ready_(std::move(ready)), op_facts_(std::move(op_facts)),
        linear_(std::move(linear)), flops_(std::move(flops)),
        matmul_rate_(matmul_rate), vector_rate_(vector_rate), hbm_rate_(hbm_rate), launch_us_(launch_us),
        prepacked_linear_(prepacked_linear), measure_host_(measure_host) {}

  ~Recorder() {
    if (active == this) exit();  // dropped inside a step (its exit never ran): unhook this thread
  }

  // -- the facade's side ------------------------------------------------------------------------
  // decode_attention.c's two functions (``decode_attention.kernel_addresses``): a decode batch's
  // attention is computed here without the Python round trip of ``gathered_decode_attention``.
  // Without them (the kernel chosen off, or not built) that function would return None: the op runs.
  void use_attention_kernel(uintptr_t attention, uintptr_t prefix_lengths) {
    attention_kernel_ = reinterpret_cast<AttentionKernel>(attention);
    prefix_lengths_ = reinterpret_cast<PrefixLengths>(prefix_lengths);
  }

  void set_stream(int sid, const std::string& name) {
    sid_ = sid;
    sid_object_ = py::int_(sid);
    track_ = spans_.intern(name);
  }

  void enter(py::object entry, py::object outer) {
    entry_ = entry.ptr();
    outer_ = std::move(outer);
    previous_ = active;
    was_included_ = c10::impl::tls_is_dispatch_key_included(kHookKey);
    active = this;
    c10::impl::tls_set_dispatch_key_included(kHookKey, true);
  }

  void exit() {
    settle_all();  // a gather not read in the step holds its rows when the host reads it
    c10::impl::tls_set_dispatch_key_included(kHookKey, was_included_);
    active = previous_;
    previous_ = nullptr;
    entry_ = nullptr;
    outer_ = py::tuple();
  }

  // ``SimDevice._key``: the block of ``t``'s storage, fresh (owned by ``actor``) where new or reused.
  py::object key(const at::Tensor& t, int actor) {
    int64_t ptr = storage_key(t);
    if (ptr == 0) return py::none();
    tracked(ptr, t, actor);
    return py::int_(ptr);
  }

  bool is_device(const at::Tensor& t) const {
    int64_t ptr = storage_key(t);
    return on_device(ptr);
  }

  void mark(const at::Tensor& t, int actor) {
    int64_t ptr = storage_key(t);
    if (ptr != 0) tracked(ptr, t, actor).device = true;
  }

  // ``SimDevice._sweep``: free the blocks other streams used whose storage has died.
  void sweep() {
    const auto& cross = detector_.cross();
    if (cross.empty()) return;
    std::vector<int64_t> dead;
    for (int64_t key : cross) {
      auto it = refs_.find(key);
      if (it != refs_.end() && it->second.ref.expired()) dead.push_back(key);
    }
    for (int64_t key : dead) {
      refs_.erase(key);
      detector_.free(key, "free (host drops the last reference)", py::tuple());
    }
  }

  bool paused = false;
  double speed = 1.0;
  int64_t prepack_min_elements = 0;  // ``cpu_kernels.PREPACK_MIN_ELEMENTS``
  double dispatch_s = 0.0;

  // -- the hook ---------------------------------------------------------------------------------
  void dispatch(const c10::OperatorHandle& op, c10::DispatchKeySet keys, torch::jit::Stack* stack) {
    auto started = measure_host_ ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point();
    const OpNames& known = facts_of(op);
    const OpFacts& facts = *known.facts;
    if (facts.decomposes && keys.has_any(c10::autograd_dispatch_keyset)) {
      // Outside inference mode autograd splits this op into others before a Python dispatch mode
      // would see it: let it, and see those (still hooked) instead.
      op.redispatchBoxed(keys & c10::DispatchKeySet(c10::DispatchKeySet::FULL_AFTER, kHookKey), stack);
      return;
    }
    const auto& schema = op.schema();
    size_t count = schema.arguments().size();
    c10::SmallVector<c10::IValue, 8> args;
    if (!facts.skip && !paused) {
      auto view = torch::jit::last(*stack, count);
      args.append(view.begin(), view.end());
    }
    // A deferred gather's rows are copied before an op reads its output or touches its source; an
    // attention takes them from the cache in ``route`` where it can.
    if (!gathered_.empty() && !facts.view && facts.kind != OpFacts::kAttention) settle(torch::jit::last(*stack, count));
    if (!route(op, facts, stack)) {
      if (!gathered_.empty() && facts.kind == OpFacts::kAttention) settle(torch::jit::last(*stack, count));
      c10::impl::ExcludeDispatchKeyGuard unhooked(kHookKey);
      op.redispatchBoxed(keys & c10::DispatchKeySet(c10::DispatchKeySet::FULL_AFTER, kHookKey), stack);
    }
    if (!facts.skip && !paused) {
      py::gil_scoped_acquire gil;
      on_op(known, args, torch::jit::last(*stack, schema.returns().size()));
    }
    if (measure_host_)
      dispatch_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  }

 private:
  static int64_t storage_key(const at::Tensor& t) {
    if (!t.defined() || !t.has_storage()) return 0;
    return reinterpret_cast<int64_t>(t.storage().data());
  }

  bool on_device(int64_t ptr) const {
    if (ptr == 0) return false;
    auto it = refs_.find(ptr);
    return it != refs_.end() && it->second.device && !it->second.ref.expired();
  }

  static BlockName label(const at::Tensor& t) {
    BlockName name;
    name.kind = BlockName::kLabel;
    name.shape.assign(t.sizes().begin(), t.sizes().end());
    name.dtype = t.scalar_type();
    return name;
  }

  // The entry of ``t``'s storage at ``ptr`` (not 0); where there is none, or a dead storage's
  // (``_drop``: its block is freed, its device flag goes), a fresh block owned by ``actor``
  // (``SimDevice._key`` and ``_fresh``).
  Tracked& tracked(int64_t ptr, const at::Tensor& t, int actor) {
    auto it = refs_.find(ptr);
    if (it != refs_.end() && !it->second.ref.expired()) return it->second;
    if (it != refs_.end()) detector_.free(ptr, "free", py::tuple());
    Tracked& entry = refs_.insert_or_assign(ptr, Tracked{t.storage().getWeakStorageImpl(), false}).first->second;
    detector_.allocate(ptr, actor, label(t));
    return entry;
  }

  const OpNames& facts_of(const c10::OperatorHandle& op) {
    const void* id = &op.schema();
    auto it = names_.find(id);
    if (it != names_.end()) return it->second;
    const OpFacts& facts = learn(op);
    const std::string* name = detector_.intern(facts.name);
    return names_.emplace(id, OpNames{&facts, name, spans_.intern(facts.name)}).first->second;
  }

  const OpFacts& learn(const c10::OperatorHandle& op) {
    const void* id = &op.schema();
    auto it = known_ops.find(id);
    if (it != known_ops.end()) return it->second;
    py::gil_scoped_acquire gil;
    const auto& schema = op.schema();
    py::tuple got = op_facts_(schema.name(), schema.overload_name());
    OpFacts facts;
    facts.name = got[0].cast<std::string>();
    facts.skip = got[1].cast<bool>();
    facts.writes.assign(schema.arguments().size(), 0);
    for (auto index : got[2].cast<std::vector<int64_t>>()) facts.writes.at(index) = 1;
    facts.mutates = got[3].cast<bool>();
    facts.python_flops = got[4].cast<bool>();
    facts.kind = static_cast<OpFacts::Kind>(got[5].cast<int>());
    const auto& returns = schema.returns();
    facts.view = !returns.empty() && returns[0].alias_info() != nullptr && !returns[0].alias_info()->isWrite();
    facts.func = py::object(got[6]).release().ptr();
    // What autograd runs for a CPU tensor: its CompositeImplicitAutograd ("math") kernel, or not.
    std::string table = op.dumpComputedTable();
    auto line = table.find("\nAutogradCPU: ");
    if (line != std::string::npos) {
      auto end = table.find('\n', line + 1);
      facts.decomposes = table.substr(line, end - line).find("[math kernel]") != std::string::npos;
    }
    return known_ops.emplace(id, std::move(facts)).first->second;
  }

  // The plain run's kernels for a projection and a decode batch's attention (``__torch_dispatch__``).
  bool route(const c10::OperatorHandle& op, const OpFacts& facts, torch::jit::Stack* stack) {
    if (facts.kind == OpFacts::kPlain) return false;
    size_t count = op.schema().arguments().size();
    auto args = torch::jit::last(*stack, count);
    at::Tensor out;
    if (facts.kind == OpFacts::kGather) {
      auto gathered = defer_gather(args);
      if (!gathered) return false;
      out = std::move(*gathered);
    } else if (facts.kind == OpFacts::kLinear) {
      if (!prepacked_linear_ || count != 3 || !args[2].isNone()) return false;
      // ``cpu_kernels.applies``: where it says no, ``linear`` is F.linear, which is what running the
      // op on (unhooked) computes, without the call into Python.
      const at::Tensor& x = args[0].toTensor();
      const at::Tensor& w = args[1].toTensor();
      if (!x.device().is_cpu() || x.scalar_type() != at::kFloat || w.scalar_type() != at::kFloat || w.dim() != 2 ||
          x.dim() < 1 || w.numel() < prepack_min_elements)
        return false;
      c10::impl::ExcludeDispatchKeyGuard unhooked(kHookKey);
      py::gil_scoped_acquire gil;
      out = linear_(x, w).cast<at::Tensor>();
    } else {
      // (q, keys, values, mask) with enable_gqa and every other argument at its default.
      if (attention_kernel_ == nullptr || count != 8 || args[3].isNone() || args[4].toDouble() != 0.0 || args[5].toBool() ||
          !args[6].isNone() || !args[7].toBool())
        return false;
      c10::impl::ExcludeDispatchKeyGuard unhooked(kHookKey);
      std::optional<at::Tensor> result;
      if (!gathered_.empty()) {
        result = deferred_attention(args[0].toTensor(), args[1].toTensor(), args[2].toTensor(), args[3].toTensor());
        if (!result) settle(args);
      }
      if (!result) result = gathered_attention(args[0].toTensor(), args[1].toTensor(), args[2].toTensor(), args[3].toTensor());
      if (!result) return false;  // not a decode batch
      out = std::move(*result);
    }
    torch::jit::drop(*stack, count);
    torch::jit::push(*stack, std::move(out));
    return true;
  }

  // A decode batch's gather of key or value rows from the KV cache (``index_select(cache, 0, slots)``),
  // recorded as it is but not copied: its output is a fresh block of the same shape, and the rows
  // it would hold are remembered. The attention kernel then reads them from the cache itself
  // (``deferred_attention``), as the plain run does; anything else that reads the output first gets
  // the copy (``settle``). Only where the attention kernel is there to read them.
  std::optional<at::Tensor> defer_gather(c10::ArrayRef<c10::IValue> args) {
    if (attention_kernel_ == nullptr || args.size() != 3 || !args[0].isTensor() || !args[2].isTensor() ||
        args[1].toInt() != 0)
      return std::nullopt;
    const at::Tensor& source = args[0].toTensor();
    const at::Tensor& index = args[2].toTensor();
    if (!source.device().is_cpu() || source.scalar_type() != at::kFloat || source.dim() != 3 ||
        !source.is_contiguous() || index.scalar_type() != at::kLong || index.dim() != 1 || !index.is_contiguous() ||
        index.numel() == 0)
      return std::nullopt;
    const int64_t* slots = index.data_ptr<int64_t>();
    const int64_t rows = source.size(0);
    for (int64_t i = 0, n = index.numel(); i < n; ++i)
      if (slots[i] < 0 || slots[i] >= rows) return std::nullopt;  // index_select's own error, when it runs
    c10::impl::ExcludeDispatchKeyGuard unhooked(kHookKey);  // neither the output nor the slots' copy is an op
    at::Tensor out = at::empty({index.numel(), source.size(1), source.size(2)}, source.options());
    purge_gathered();
    // The slots by value: the index tensor may be written before the rows are read.
    gathered_.insert_or_assign(storage_key(out), Gathered{out.storage().getWeakStorageImpl(), source, index.clone()});
    return out;
  }

  // SDPA over two deferred gathers of the same slots, shaped as ``gathered_attention`` takes them:
  // the kernel reads the cache rows the gathers would have copied, in the same order, so the values
  // are the gathered path's bit for bit. nullopt where it does not apply.
  std::optional<at::Tensor> deferred_attention(const at::Tensor& q, const at::Tensor& keys, const at::Tensor& values,
                                               const at::Tensor& mask) {
    auto k = gathered_.find(storage_key(keys));
    auto v = gathered_.find(storage_key(values));
    if (k == gathered_.end() || v == gathered_.end() || k->second.out.expired() || v->second.out.expired() ||
        keys.storage_offset() != 0 || values.storage_offset() != 0 || !k->second.index.equal(v->second.index) ||
        !decode_batch(q, keys, values, mask))
      return std::nullopt;
    int64_t batch = q.size(0), span = keys.size(2);
    const at::Tensor& k_cache = k->second.source;
    const at::Tensor& v_cache = v->second.source;
    if (k_cache.sizes() != v_cache.sizes() || k_cache.size(2) != q.size(3) || k->second.index.numel() != batch * span ||
        keys.size(1) != k_cache.size(1))
      return std::nullopt;
    return attend(q, k_cache, v_cache, k->second.index.view({batch, span}), mask);
  }

  // Copy the rows of every deferred gather whose output or source is among these arguments: before
  // an op reads the rows, or writes where they come from.
  void settle(c10::ArrayRef<c10::IValue> args) {
    c10::SmallVector<int64_t, 4> due;
    for (const auto& arg : args)
      each_tensor(arg, [&](const at::Tensor& t) {
        int64_t key = storage_key(t);
        if (key == 0) return;
        for (const auto& [out, entry] : gathered_)
          if (out == key || storage_key(entry.source) == key) due.push_back(out);
      });
    for (int64_t out : due)
      if (gathered_.count(out) != 0) settle_one(out);
  }

  void settle_all() {
    while (!gathered_.empty()) settle_one(gathered_.begin()->first);
  }

  void settle_one(int64_t key) {
    auto it = gathered_.find(key);
    Gathered entry = std::move(it->second);
    gathered_.erase(it);
    c10::intrusive_ptr<c10::StorageImpl> storage = entry.out.lock();
    if (!storage) return;  // dropped unread
    c10::impl::ExcludeDispatchKeyGuard unhooked(kHookKey);
    at::Tensor rows = at::empty({0}, entry.source.options())
                          .set_(c10::Storage(std::move(storage)), 0,
                                {entry.index.numel(), entry.source.size(1), entry.source.size(2)});
    at::index_select_out(rows, entry.source, 0, entry.index);
  }

  void purge_gathered() {
    for (auto it = gathered_.begin(); it != gathered_.end();) it = it->second.out.expired() ? gathered_.erase(it) : ++it;
  }

  // ``decode_attention.gathered_decode_attention`` (its checks, then ``_run``) without Python: the
  // same kernel on the same rows with the same scale, so the same values bit for bit. nullopt where
  // the Python function returns None.
  std::optional<at::Tensor> gathered_attention(const at::Tensor& q, const at::Tensor& keys, const at::Tensor& values,
                                               const at::Tensor& mask) {
    if (!decode_batch(q, keys, values, mask)) return std::nullopt;
    int64_t batch = q.size(0), head_dim = q.size(3), span = keys.size(2);
    auto cached = slots_.find({batch, span});
    if (cached == slots_.end())  // row b's keys are gathered rows b * span ...
      cached = slots_.emplace(std::make_pair(batch, span), at::arange(batch * span).view({batch, span})).first;
    // [B, kv_heads, S, head_dim] views of gathered [B, S, kv_heads, head_dim] rows, as rows.
    return attend(q, keys.transpose(1, 2).view({batch * span, -1, head_dim}),
                  values.transpose(1, 2).view({batch * span, -1, head_dim}), cached->second, mask);
  }

  // What both routes check (``gathered_decode_attention``'s checks and ``applies``): a decode batch's
  // q [B, heads, 1, head_dim], keys and values transposed views of [B, S, kv_heads, head_dim] rows,
  // a boolean [B, 1, 1, S] mask; fp32 on the CPU, one torch thread.
  static bool decode_batch(const at::Tensor& q, const at::Tensor& keys, const at::Tensor& values,
                           const at::Tensor& mask) {
    if (!mask.defined() || mask.scalar_type() != at::kBool || q.dim() != 4 || q.size(2) != 1 || keys.dim() != 4 ||
        keys.sizes() != values.sizes() || mask.dim() != 4 || mask.size(0) != q.size(0) || mask.size(1) != 1 ||
        mask.size(2) != 1 || mask.size(3) != keys.size(2))
      return false;
    if (!q.device().is_cpu() || q.scalar_type() != at::kFloat || keys.scalar_type() != at::kFloat ||
        at::get_num_threads() != 1)
      return false;
    return keys.transpose(1, 2).is_contiguous() && values.transpose(1, 2).is_contiguous() && mask.is_contiguous();
  }

  // The kernel over rows ``slots`` of k and v ([rows, kv_heads, head_dim]), each request's length
  // from the mask's prefix; SDPA's [B, heads, 1, head_dim]. nullopt where the mask is no prefix.
  std::optional<at::Tensor> attend(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                   const at::Tensor& slots, const at::Tensor& mask) {
    int64_t batch = q.size(0), heads = q.size(1), head_dim = q.size(3), span = mask.size(3);
    at::Tensor lens = at::empty({batch}, at::TensorOptions().dtype(at::kLong));
    if (prefix_lengths_(mask.data_ptr(), batch, span, lens.data_ptr<int64_t>()) != 0) return std::nullopt;
    at::Tensor q_rows = q.reshape({batch, heads, head_dim}).contiguous();
    at::Tensor out = at::empty({batch, heads * head_dim}, at::TensorOptions().dtype(q.scalar_type()));
    float scale = static_cast<float>(std::pow(static_cast<double>(head_dim), -0.5));  // Python's head_dim ** -0.5
    if (attention_kernel_(q_rows.data_ptr<float>(), k.data_ptr<float>(), v.data_ptr<float>(), slots.data_ptr<int64_t>(),
                          lens.data_ptr<int64_t>(), out.data_ptr<float>(), batch, heads, k.size(1), head_dim,
                          slots.stride(0), scale) != 0)
      throw std::runtime_error("decode_attention: no memory for the scores");
    return out.view({batch, 1, heads, head_dim}).transpose(1, 2);
  }

  // The tensors in an argument, as a Python dispatch mode gets them: a wrapped number (``x + 1``'s
  // 1, a 0-dim tensor here) reaches Python as the number, no memory.
  template <typename F>
  static void each_tensor(const c10::IValue& value, F&& f) {
    if (value.isTensor()) {
      const at::Tensor& t = value.toTensor();
      if (!t.unsafeGetTensorImpl()->is_wrapped_number()) f(t);
    } else if (value.isTensorList()) {
      for (const at::Tensor& t : value.toTensorList()) f(t);
    } else if (value.isList()) {
      for (const c10::IValue& item : value.toListRef())
        if (item.isTensor()) f(item.toTensor());
    }
  }

  void on_op(const OpNames& known, c10::ArrayRef<c10::IValue> args, c10::ArrayRef<c10::IValue> outs) {
    const OpFacts& facts = *known.facts;
    bool device = false;
    for (const auto& arg : args) {
      each_tensor(arg, [&](const at::Tensor& t) { device = device || on_device(storage_key(t)); });
      if (device) break;
    }
    if (!device) return;  // host work on host memory: part of the host step
    int sid = sid_;
    c10::SmallVector<int64_t, 8> reads, writes;
    int64_t nbytes = 0;
    for (size_t i = 0; i < args.size(); ++i) {
      bool write = facts.writes[i] != 0;
      each_tensor(args[i], [&](const at::Tensor& t) {
        int64_t ptr = storage_key(t);
        if (ptr == 0) return;
        (write ? writes : reads).push_back(ptr);
        tracked(ptr, t, sid).device = true;  // host memory a kernel reads is copied to the device first
        nbytes += t.numel() * static_cast<int64_t>(t.element_size());
      });
    }
    int64_t out_numel = 0;
    c10::SmallVector<std::pair<int64_t, BlockName>, 2> fresh_outputs;
    if (!facts.mutates) {
      auto output = [&](const at::Tensor& t) {
        int64_t ptr = storage_key(t);
        if (ptr == 0) return;
        auto it = refs_.find(ptr);
        if (it == refs_.end() || it->second.ref.expired()) {
          if (it != refs_.end()) {  // a dead storage's address: its block goes (its device flag stays)
            it->second.ref = t.storage().getWeakStorageImpl();
            it->second.device = true;
            if (detector_.crossed(ptr))
              detector_.free(ptr, "free", py::tuple());
            else
              detector_.forget(ptr);
          } else {
            refs_.emplace(ptr, Tracked{t.storage().getWeakStorageImpl(), true});
          }
          fresh_outputs.emplace_back(ptr, label(t));
        } else {
          writes.push_back(ptr);
          it->second.device = true;
        }
        out_numel += t.numel();
        nbytes += t.numel() * static_cast<int64_t>(t.element_size());
      };
      if (outs.size() == 1) {
        each_tensor(outs[0], output);
      } else {
        for (const auto& value : outs)
          if (value.isTensor()) output(value.toTensor());
      }
    }
    double compute;
    if (facts.kind == OpFacts::kLinear) {
      const at::Tensor& input = args[0].toTensor();
      const at::Tensor& weight = args[1].toTensor();
      if (input.size(-1) == 0) throw py::value_error("linear over an empty last dimension");
      int64_t flops = 2 * (input.numel() / input.size(-1)) * weight.size(0) * weight.size(1);
      compute = static_cast<double>(flops) / matmul_rate_;
    } else if (facts.python_flops) {
      py::list values;
      for (const auto& arg : args) values.append(torch::jit::toPyObject(arg));
      py::object out = outs.size() == 1 ? torch::jit::toPyObject(outs[0]) : py::object(py::none());
      if (outs.size() > 1) {
        py::tuple all(outs.size());
        for (size_t i = 0; i < outs.size(); ++i) all[i] = torch::jit::toPyObject(outs[i]);
        out = all;
      }
      compute = flops_(py::handle(facts.func), values, out).cast<double>() / matmul_rate_;
    } else {
      compute = static_cast<double>(out_numel) / vector_rate_;
    }
    double memory = static_cast<double>(nbytes) / hbm_rate_;
    PyObject* ready = PyDict_GetItemWithError(ready_.ptr(), sid_object_.ptr());  // borrowed
    if (ready == nullptr) throw py::error_already_set();
    double start = std::max(PyFloat_AsDouble(ready), spans_.host_us);
    double end = start + (launch_us_ + std::max(compute, memory)) * speed;
    py::float_ end_object(end);
    if (PyDict_SetItem(ready_.ptr(), sid_object_.ptr(), end_object.ptr()) != 0) throw py::error_already_set();
    spans_.add(track_, known.span_name, start, end);
    Frames frames;
    bool reached = capture_stack(entry_, frames);
    detector_.op(sid, known.name, reads, writes, true, std::move(frames), reached ? outer_ : py::tuple(),
                 fresh_outputs.data(), fresh_outputs.size(), nullptr);
  }

  Detector& detector_;
  py::object detector_object_;
  Spans& spans_;
  py::object spans_object_;
  py::dict ready_;
  py::object op_facts_, linear_, flops_;
  using AttentionKernel = int (*)(const float*, const float*, const float*, const int64_t*, const int64_t*, float*,
                                  int64_t, int64_t, int64_t, int64_t, int64_t, float);
  using PrefixLengths = int (*)(const void*, int64_t, int64_t, int64_t*);
  AttentionKernel attention_kernel_ = nullptr;
  PrefixLengths prefix_lengths_ = nullptr;
  std::map<std::pair<int64_t, int64_t>, at::Tensor> slots_;
  // Deferred gathers by their output's storage (``defer_gather``): what its rows would be.
  struct Gathered {
    c10::weak_intrusive_ptr<c10::StorageImpl> out;
    at::Tensor source, index;
  };
  std::unordered_map<int64_t, Gathered> gathered_;
  double matmul_rate_, vector_rate_, hbm_rate_, launch_us_;
  bool prepacked_linear_, measure_host_;
  int sid_ = 0;
  py::object sid_object_ = py::int_(0);
  uint32_t track_ = 0;
  // Compared, never followed, so borrowed: ``SimDevice._entry`` holds the frame for the step. A
  // reference here would be one the garbage collector cannot see: a step left open in a suspended
  // generator (frame -> generator -> device -> this) would never be collected and closed.
  PyObject* entry_ = nullptr;
  py::object outer_ = py::tuple();
  Recorder* previous_ = nullptr;
  bool was_included_ = false;
  ska::flat_hash_map<int64_t, Tracked> refs_;
  std::unordered_map<const void*, OpNames> names_;
};

void hook(const c10::OperatorHandle& op, c10::DispatchKeySet keys, torch::jit::Stack* stack) {
  Recorder* recorder = active;
  if (recorder == nullptr) {
    c10::impl::ExcludeDispatchKeyGuard unhooked(kHookKey);
    op.redispatchBoxed(keys & c10::DispatchKeySet(c10::DispatchKeySet::FULL_AFTER, kHookKey), stack);
    return;
  }
  recorder->dispatch(op, keys, stack);
}

std::vector<int64_t> clock_of(const py::object& event) { return event.cast<std::vector<int64_t>>(); }

py::object stack_or_empty(const py::object& stack) { return stack.is_none() ? py::tuple() : stack; }

}  // namespace

TORCH_LIBRARY_IMPL(_, TESTING_ONLY_GenericMode, m) { m.fallback(torch::CppFunction::makeFromBoxedFunction<&hook>()); }

namespace {

// ``OpOverload.is_view``: an aliased argument, none of them written.
bool is_view(const c10::FunctionSchema& schema) {
  int write = -1;
  for (const auto& argument : schema.arguments()) {
    const c10::AliasInfo* alias = argument.alias_info();
    if (alias == nullptr) continue;
    write = (write == 1 || alias->isWrite()) ? 1 : 0;
  }
  return write == 0;
}

// A view records nothing (``_op_info``: skip), and a view with no CompositeImplicitAutograd kernel
// runs no op that records anything (its kernel makes the view, or calls another view). The hook's
// key falls through for those: the dispatcher passes them by instead of boxing each for the hook,
// and most of a narrow model's ops are views. A view with a math kernel (``reshape`` may copy) keeps
// the hook, which runs it unhooked as the Python mode does.
void pass_views_by() {
  static auto* library = new torch::Library(torch::Library::IMPL, "aten", kHookKey, __FILE__, __LINE__);
  auto& dispatcher = c10::Dispatcher::singleton();
  for (const auto& name : dispatcher.getAllOpNames()) {
    if (name.name.rfind("aten::", 0) != 0) continue;
    auto op = dispatcher.findOp(name);
    if (!op || !op->hasSchema() || !is_view(op->schema()) ||
        op->hasKernelForDispatchKey(c10::DispatchKey::CompositeImplicitAutograd))
      continue;
    std::string full = name.overload_name.empty() ? name.name : name.name + "." + name.overload_name;
    library->impl(full.c_str(), torch::CppFunction::makeFallthrough());
  }
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "The simulator's per-op work in C++ (scheduler_core/sim/native_core.cpp).";
  pass_views_by();

  py::class_<Detector>(m, "Detector")
      .def(py::init<py::object, py::object, py::object, py::object>(), py::arg("format_stack"), py::arg("hazard"),
           py::arg("stack_factory"), py::arg("label"))
      .def("new_stream", &Detector::new_stream)
      .def("launch", &Detector::launch)
      .def("record", [](Detector& d, int stream) { return py::tuple(py::cast(d.record(stream))); })
      .def("wait_event", [](Detector& d, int stream, py::object event) { d.wait_event(stream, clock_of(event)); })
      .def("wait_stream", &Detector::wait_stream)
      .def("sync_event", [](Detector& d, py::object event) { d.sync_event(clock_of(event)); })
      .def("sync_stream", &Detector::sync_stream)
      .def("sync_device", &Detector::sync_device)
      .def("reads_done",
           [](Detector& d, int stream, py::object event, std::vector<int64_t> keys, py::object stack) {
             d.reads_done(stream, clock_of(event), keys, stack_or_empty(stack));
           },
           py::arg("stream"), py::arg("event"), py::arg("keys"), py::arg("stack") = py::tuple())
      .def("op",
           [](Detector& d, int actor, const std::string& op, std::vector<int64_t> reads, std::vector<int64_t> writes,
              py::object stack, py::object fresh) {
             std::vector<std::pair<int64_t, BlockName>> blocks;
             for (auto item : fresh) {
               auto pair = item.cast<py::tuple>();
               BlockName name;
               name.kind = BlockName::kObject;
               name.object = pair[1];
               blocks.emplace_back(pair[0].cast<int64_t>(), std::move(name));
             }
             py::list found;
             d.op(actor, d.intern(op), reads, writes, false, Frames(), stack_or_empty(stack), blocks.data(), blocks.size(),
                  &found);
             return found;
           },
           py::arg("actor"), py::arg("op"), py::arg("reads"), py::arg("writes"), py::arg("stack") = py::tuple(),
           py::arg("fresh") = py::tuple())
      .def("allocate",
           [](Detector& d, int64_t key, int actor, py::object name) {
             BlockName block;
             if (!name.is_none() && PyObject_IsTrue(name.ptr())) {
               block.kind = BlockName::kObject;
               block.object = name;
             }
             d.allocate(key, actor, std::move(block));
           },
           py::arg("key"), py::arg("actor"), py::arg("name") = py::none())
      .def("name", &Detector::name)
      .def("record_stream", &Detector::record_stream)
      .def("free", [](Detector& d, int64_t key, const std::string& op, py::object stack) {
             return d.free(key, op, stack_or_empty(stack));
           },
           py::arg("key"), py::arg("op") = "free", py::arg("stack") = py::tuple())
      .def_property_readonly("hazards", &Detector::hazards)
      .def_property_readonly("names", &Detector::names);

  py::class_<Spans>(m, "Spans")
      .def(py::init<bool>())
      .def("add", &Spans::add_named)
      .def_readwrite("host_us", &Spans::host_us)
      .def_readonly("keep_spans", &Spans::keep_)
      .def_property_readonly("busy_us", &Spans::busy)
      .def_property_readonly("first_us", &Spans::first)
      .def_property_readonly("tracks", [](const Spans& s) { return s.column(s.tracks_); })
      .def_property_readonly("names", [](const Spans& s) { return s.column(s.names_); })
      .def_property_readonly("times", [](const Spans& s) { return s.times_; })
      .def_property_readonly("issued", [](const Spans& s) { return s.issued_; })
      .def("extent", &Spans::extent)
      .def("idle_gaps", &Spans::idle_gaps);

  py::class_<Recorder>(m, "Recorder")
      .def(py::init([](py::object detector, py::object spans, py::dict ready, py::object op_facts, py::object linear,
                       py::object flops, double matmul_rate, double vector_rate, double hbm_rate, double launch_us,
                       bool prepacked_linear, bool measure_host) {
             return new Recorder(detector.cast<Detector&>(), detector, spans.cast<Spans&>(), spans, std::move(ready),
                                 std::move(op_facts), std::move(linear), std::move(flops), matmul_rate, vector_rate,
                                 hbm_rate, launch_us, prepacked_linear, measure_host);
           }))
      .def("set_stream", &Recorder::set_stream)
      .def("use_attention_kernel", &Recorder::use_attention_kernel)
      .def("enter", &Recorder::enter)
      .def("exit", &Recorder::exit)
      .def("key", &Recorder::key)
      .def("is_device", &Recorder::is_device)
      .def("mark", &Recorder::mark)
      .def("sweep", &Recorder::sweep)
      .def_readwrite("paused", &Recorder::paused)
      .def_readwrite("prepack_min_elements", &Recorder::prepack_min_elements)
      .def_readwrite("speed", &Recorder::speed)
      .def_readonly("dispatch_s", &Recorder::dispatch_s);
}
