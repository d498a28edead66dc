/* _ccrun_hook: the start-up hook's per-call wrappers, in C.
 *
 * ccrun_progress.py wraps torch.distributed's collectives and DistributedDataParallel.forward so
 * that every call records its issue and completion in the worker's progress record
 * (include/ccrun/progress.h). Written in Python, a wrapper costs 1-1.5 us a call whatever it
 * does (a pass-through alone is 0.8-1.4 us): 5-15% of a small gloo call, more of a small
 * forward. The same wrappers here cost a C call and a few stores: a clock read, the stores the
 * record needs, and torch's own `numel()` for the element count.
 *
 * This module holds only the hot path: the wrappers, and the async calls pending until their
 * Work's wait(). ccrun_progress.py decides what to wrap and how (which argument is the group,
 * which holds the tensor, which says async), makes the slots (Slot, which its Python code
 * reads too) and falls back to its Python wrappers wherever this module does not load
 * (another Python, a build without it). Each wrapper does exactly what its Python twin does;
 * tests/integration/test_python_hook.py runs its cases on both. Never raises for its own sake:
 * a failure inside the hook leaves the call unrecorded, and torch's own errors go to the caller
 * unchanged.
 *
 * Built twice from this source: for the system's Python, with the full C API, as
 * _ccrun_hook.cpython-3XY-*.so; and on the stable ABI of Python 3.11 (Py_LIMITED_API), as
 * _ccrun_hook.abi3.so, which any later Python loads (a conda or venv Python 3.12 on a GPU
 * node). Both are called by vectorcall and call torch's functions the same way. Each Python
 * imports the first it can: its own build, else the stable one. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

/* Vectorcall: how the interpreter calls the wrappers and how they call torch's functions, in
 * both builds. The stable ABI has it from Python 3.12; Python 3.11, the oldest this module
 * loads in (PyInit__ccrun_hook checks), exports the same functions with the same signatures
 * and honours the same type flag and __vectorcalloffset__ member, but its limited API does
 * not declare them: declared here as 3.12's stable ABI has them. (Through tp_call, the
 * stable-ABI build cost 50-250 ns a call more: a tuple and a dict made at every call.) */
#if defined(Py_LIMITED_API) && Py_LIMITED_API + 0 < 0x030C0000
typedef PyObject* (*vectorcallfunc)(PyObject*, PyObject* const*, size_t, PyObject*);
#define PY_VECTORCALL_ARGUMENTS_OFFSET ((size_t)1 << (8 * sizeof(size_t) - 1))
#define Py_TPFLAGS_HAVE_VECTORCALL (1UL << 11)
PyAPI_FUNC(PyObject*) PyObject_Vectorcall(PyObject* callable, PyObject* const* args,
                                          size_t nargsf, PyObject* kwnames);
PyAPI_FUNC(PyObject*) PyObject_VectorcallMethod(PyObject* name, PyObject* const* args,
                                                size_t nargsf, PyObject* kwnames);
PyAPI_FUNC(PyObject*) PyVectorcall_Call(PyObject* callable, PyObject* tuple, PyObject* dict);
#endif
#ifdef Py_LIMITED_API
#define TUPLE_SIZE(t) PyTuple_Size(t)
#define TUPLE_ITEM(t, i) PyTuple_GetItem(t, i)
#else
#define TUPLE_SIZE(t) PyTuple_GET_SIZE(t)
#define TUPLE_ITEM(t, i) PyTuple_GET_ITEM(t, i)
#endif

static inline Py_ssize_t nargs_of(size_t nargsf) {
  return (Py_ssize_t)(nargsf & ~PY_VECTORCALL_ARGUMENTS_OFFSET);
}
/* Calls the callable a wrapper wraps with the wrapper's own arguments. */
static inline PyObject* call_wrapped(PyObject* fn, PyObject* const* args, size_t nargsf,
                                     PyObject* kwnames) {
  return PyObject_Vectorcall(fn, args, nargsf, kwnames);
}
/* fn(arg); the slot before arg's is the callee's to use (the offset flag). */
static inline PyObject* call_one(PyObject* fn, PyObject* arg) {
  PyObject* stack[2] = {NULL, arg};
  return PyObject_Vectorcall(fn, stack + 1, 1 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
}
/* o.name() */
static inline PyObject* call_method(PyObject* o, PyObject* name) {
  return PyObject_VectorcallMethod(name, &o, 1 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
}

/* Replaces *at's reference with `value`'s (a new one). */
static inline void set_ref(PyObject** at, PyObject* value) {
  PyObject* old = *at;
  *at = value;
  Py_XDECREF(old);
}

/* progress.h's GroupSlot: byte offsets within a 64-byte slot. */
enum {
  kRecordBytes = 4096,
  kSlotsAt = 64,
  kSlotBytes = 64,
  kMaxGroups = 48,
  kIssued = 16,
  kCompleted = 24,
  kOp = 32,
  kWaitUs = 36,
  kCount = 40,
  kIssuedNs = 48,
  kCompletedNs = 56,
  kOpCallsAt = 3200,   /* op_calls[slot][op - 1], u32, for the first kOpCountGroups slots */
  kOpCountGroups = 16,
  kCountedOps = 12,    /* ops 1..12 */
};

static Py_buffer g_record;  /* the mapped record; g_record.buf NULL until attach() */
static _Thread_local int g_busy;  /* inside a wrapper that calls another (set_guard) */

static inline int64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);  /* the record's clock, as now_ns() */
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* The agent reads with relaxed loads; issued and completed are written last. */
static inline void store64(unsigned char* at, uint64_t v) {
  __atomic_store_n((uint64_t*)at, v, __ATOMIC_RELEASE);
}
static inline void store32(unsigned char* at, uint32_t v) {
  __atomic_store_n((uint32_t*)at, v, __ATOMIC_RELEASE);
}

/* ---- Slot: one group's slot, and what this process last wrote to it ---- */

typedef struct {
  PyObject_HEAD
  unsigned long long seq, done, count;  /* the last issued, the last completed; count written */
  unsigned int op, wait_us;             /* op written; wait_us written (wrapping) */
  Py_ssize_t index;                     /* the slot's number */
  unsigned char* at;                    /* its bytes in the record */
  uint32_t* op_calls;                   /* its per-op call counts; NULL: it has none */
} Slot;

static int slot_init(Slot* self, PyObject* args, PyObject* kwargs) {
  Py_ssize_t index;
  static char* names[] = {"index", NULL};
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "n", names, &index)) return -1;
  if (g_record.buf == NULL || index < 0 || index >= kMaxGroups) {
    PyErr_SetString(PyExc_ValueError, "Slot: no record attached, or index out of range");
    return -1;
  }
  self->index = index;
  self->at = (unsigned char*)g_record.buf + kSlotsAt + kSlotBytes * index;
  self->op_calls = index < kOpCountGroups
                       ? (uint32_t*)((unsigned char*)g_record.buf + kOpCallsAt) +
                             kCountedOps * index
                       : NULL;
  self->seq = self->done = self->count = 0;
  self->op = self->wait_us = 0;
  return 0;
}

/* The record's typed views' indices of this slot's fields, as ccrun_progress._Slot has them. */
static Py_ssize_t field_base(Slot* s) { return kSlotsAt + kSlotBytes * s->index; }

static PyObject* slot_index(Slot* s, void* closure) {
  (void)closure;
  Py_ssize_t b = field_base(s);
  return Py_BuildValue("(nnnnnn)", (b + kOp) / 4, (b + kCount) / 8, (b + kIssuedNs) / 8,
                       (b + kIssued) / 8, (b + kCompletedNs) / 8, (b + kCompleted) / 8);
}

static PyObject* slot_field(Slot* s, void* closure) {
  Py_ssize_t offset = (Py_ssize_t)(intptr_t)closure;
  Py_ssize_t width = offset == kWaitUs ? 4 : 8;
  return PyLong_FromSsize_t((field_base(s) + offset) / width);
}

static PyMemberDef slot_members[] = {
    {"seq", T_ULONGLONG, offsetof(Slot, seq), 0, "the last sequence number issued"},
    {"done", T_ULONGLONG, offsetof(Slot, done), 0, "the last sequence number completed"},
    {"op", T_UINT, offsetof(Slot, op), 0, "the op the record holds"},
    {"count", T_ULONGLONG, offsetof(Slot, count), 0, "the count the record holds"},
    {"wait_us", T_UINT, offsetof(Slot, wait_us), 0, "the wait_us the record holds"},
    {"number", T_PYSSIZET, offsetof(Slot, index), READONLY, "the slot's number in the record"},
    {NULL, 0, 0, 0, NULL},
};

static PyGetSetDef slot_getset[] = {
    {"index", (getter)slot_index, NULL, "view indices: op, count, issued_ns, issued, "
     "completed_ns, completed", NULL},
    {"i_completed", (getter)slot_field, NULL, NULL, (void*)(intptr_t)kCompleted},
    {"i_completed_ns", (getter)slot_field, NULL, NULL, (void*)(intptr_t)kCompletedNs},
    {"i_issued_ns", (getter)slot_field, NULL, NULL, (void*)(intptr_t)kIssuedNs},
    {"i_wait_us", (getter)slot_field, NULL, NULL, (void*)(intptr_t)kWaitUs},
    {NULL, NULL, NULL, NULL, NULL},
};

/* The dealloc of the types that hold no references (heap types: each object holds one to its
 * type). */
static void plain_dealloc(PyObject* self) {
  PyTypeObject* type = Py_TYPE(self);
  PyObject_Free(self);
  Py_DECREF(type);
}

static PyType_Slot slot_slots[] = {
    {Py_tp_doc, "Slot(index): a group's slot in the attached record, and what this process "
                "last wrote to it (ccrun_progress._Slot's fields)."},
    {Py_tp_new, PyType_GenericNew},
    {Py_tp_init, slot_init},
    {Py_tp_dealloc, plain_dealloc},
    {Py_tp_members, slot_members},
    {Py_tp_getset, slot_getset},
    {0, NULL},
};
static PyType_Spec slot_spec = {"_ccrun_hook.Slot", sizeof(Slot), 0, Py_TPFLAGS_DEFAULT,
                                slot_slots};
static PyTypeObject* SlotType;

/* Records the completion of call `seq`: the first time only (a Work waited twice). */
static void complete(Slot* s, uint64_t seq, int64_t issued_ns) {
  s->done = seq;
  int64_t now = now_ns();
  store64(s->at + kCompletedNs, (uint64_t)now);
  store64(s->at + kCompleted, seq);
  int64_t waited = now - issued_ns;
  if (waited > 0) {
    s->wait_us = (unsigned int)(s->wait_us + (uint64_t)waited / 1000);
    store32(s->at + kWaitUs, s->wait_us);
  }
}

/* ---- pending async calls: each Work until its wait() or is_completed() says it is done ---- */

/* An async call (a Collective's, with a Work) is completed by its Work's wait() or
 * is_completed() (WorkMethod), which every synchronous call of torch's also goes through: so
 * the table answers "is this Work pending?" in a probe or two, and an async call costs no
 * Python object (a dict of tuples cost 0.3-0.5 us a call). Open addressing by the Work's
 * address (the table holds a reference to the Work and its Slot, so the address is not reused
 * while the Work is in it), with backward-shift deletion; and the order of issue, by serial,
 * to forget what nobody waits for: the oldest of the last kPendingMax async calls is forgotten
 * when another is issued. All under the GIL. */
enum {
  kPendingMax = 4096,
  kPendingBuckets = 2 * kPendingMax,  /* a power of two: at most half full */
};
typedef struct {
  PyObject* work;  /* NULL: an empty bucket */
  Slot* slot;
  uint64_t seq;     /* the call's number in its slot */
  uint64_t serial;  /* its number among async calls */
} Pending;

static Pending g_pending[kPendingBuckets];
static PyObject* g_issue_order[kPendingMax];  /* [serial % kPendingMax]: the Work (no reference) */
static uint64_t g_oldest_serial, g_next_serial;  /* serials that may be pending: [oldest, next) */
static size_t g_pending_count;

static size_t home_bucket(PyObject* work) {  /* Fibonacci hashing of the address */
  return (size_t)(((uint64_t)(uintptr_t)work >> 4) * 0x9E3779B97F4A7C15ull >> 51) &
         (kPendingBuckets - 1);
}

static Pending* pending_find(PyObject* work) {
  for (size_t i = home_bucket(work);; i = (i + 1) & (kPendingBuckets - 1)) {
    if (g_pending[i].work == work) return &g_pending[i];
    if (g_pending[i].work == NULL) return NULL;  /* never full: the loop ends */
  }
}

/* Takes an entry out of the table, its references with it. */
static Pending pending_take(Pending* entry) {
  Pending taken = *entry;
  size_t hole = (size_t)(entry - g_pending);
  for (size_t i = (hole + 1) & (kPendingBuckets - 1); g_pending[i].work != NULL;
       i = (i + 1) & (kPendingBuckets - 1)) {
    size_t home = home_bucket(g_pending[i].work);  /* it may move back to the hole if the */
    if (((i - home) & (kPendingBuckets - 1)) >= ((i - hole) & (kPendingBuckets - 1))) {
      g_pending[hole] = g_pending[i];            /* hole lies between its home and it */
      hole = i;
    }
  }
  g_pending[hole].work = NULL;
  --g_pending_count;
  return taken;
}

static void pending_release(Pending taken) {  /* after the table is whole: a Work's dealloc */
  Py_DECREF(taken.work);                      /* may run code that waits on another Work */
  Py_DECREF((PyObject*)taken.slot);
}

/* Remembers an async call's Work; forgets the oldest of the last kPendingMax calls. */
static void pending_add(PyObject* work, Slot* slot, uint64_t seq) {
  Pending dropped[2] = {{NULL, NULL, 0, 0}, {NULL, NULL, 0, 0}};
  if (g_next_serial - g_oldest_serial == kPendingMax) {
    Pending* oldest = pending_find(g_issue_order[g_oldest_serial % kPendingMax]);
    if (oldest != NULL && oldest->serial == g_oldest_serial) dropped[0] = pending_take(oldest);
    ++g_oldest_serial;
  }
  Pending* again = pending_find(work);  /* a Work handed out twice: its newer call */
  if (again != NULL) dropped[1] = pending_take(again);
  size_t i = home_bucket(work);
  while (g_pending[i].work != NULL) i = (i + 1) & (kPendingBuckets - 1);
  g_pending[i] = (Pending){Py_NewRef(work), (Slot*)Py_NewRef((PyObject*)slot), seq,
                           g_next_serial};
  g_issue_order[g_next_serial % kPendingMax] = work;
  ++g_next_serial;
  ++g_pending_count;
  for (int k = 0; k < 2; ++k) {
    if (dropped[k].work != NULL) pending_release(dropped[k]);
  }
}

/* ---- what the wrapper types (Collective, DdpForward, WorkMethod) share ---- */

/* Their common head: a __dict__ (functools.update_wrapper's attributes, __ccrun_wrapped__),
 * the vectorcall the interpreter calls them by, and the callable they wrap. */
typedef struct {
  PyObject_HEAD
  PyObject* dict;
  vectorcallfunc vectorcall;
  PyObject* wrapped;
} Wrapper;

#define ASSERT_WRAPPER_HEAD(type, wrapped_field)                                   \
  _Static_assert(offsetof(type, dict) == offsetof(Wrapper, dict) &&                \
                     offsetof(type, vectorcall) == offsetof(Wrapper, vectorcall) && \
                     offsetof(type, wrapped_field) == offsetof(Wrapper, wrapped),   \
                 #type " must begin as a Wrapper")

static void wrapper_dealloc(PyObject* self) {
  PyTypeObject* type = Py_TYPE(self);
  PyObject_GC_UnTrack(self);
  ((inquiry)PyType_GetSlot(type, Py_tp_clear))(self);
  PyObject_GC_Del(self);
  Py_DECREF(type);
}

/* Where the head's __dict__ and vectorcall are, for the types' specs. */
static PyMemberDef wrapper_members[] = {
    {"__dictoffset__", T_PYSSIZET, offsetof(Wrapper, dict), READONLY, NULL},
    {"__vectorcalloffset__", T_PYSSIZET, offsetof(Wrapper, vectorcall), READONLY, NULL},
    {NULL, 0, 0, 0, NULL},
};

/* How the interpreter calls a wrapper type: by its vectorcall; tp_call too, which passes the
 * arguments on in the same form. WRAPPER_SLOTS: the type slots every wrapper type has. */
#define WRAPPER_FLAGS (Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL)

#define WRAPPER_SLOTS                                                                \
  {Py_tp_call, PyVectorcall_Call}, {Py_tp_dealloc, wrapper_dealloc},                  \
      {Py_tp_repr, wrapper_repr}, {Py_tp_getset, wrapper_getset},                     \
      {Py_tp_members, wrapper_members}

static PyObject* wrapper_repr(PyObject* self) {
  return PyUnicode_FromFormat("<ccrun hook of %R>", ((Wrapper*)self)->wrapped);
}

/* bool(o.name); -1 with an error set. */
static int truthy_attr(PyObject* o, PyObject* name) {
  PyObject* v = PyObject_GetAttr(o, name);
  if (v == NULL) return -1;
  int t = PyObject_IsTrue(v);
  Py_DECREF(v);
  return t;
}

static PyGetSetDef wrapper_getset[] = {
    {"__dict__", PyObject_GenericGetDict, PyObject_GenericSetDict, NULL, NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

/* ---- Collective: the wrapper of one torch.distributed collective ---- */

typedef struct {
  PyObject_HEAD
  PyObject* dict;  /* __dict__: functools.update_wrapper's attributes, __ccrun_wrapped__ */
  vectorcallfunc vectorcall;
  PyObject* fn;        /* the collective */
  PyObject* slots;     /* hook.slots: group -> Slot, or False: not recorded */
  PyObject* slot_for;  /* hook.slot_for(group): a new group's Slot, False, or None: not yet */
  PyObject* first;     /* called when a slot's first call completed: mark("collective") */
  PyObject* count_name;  /* the keyword of the counted argument, or NULL */
  PyObject* last_group;  /* the group of the last call recorded, and its slot: a group's */
  Slot* last_slot;       /* entry in hook.slots never changes, and most calls repeat one */
  Py_ssize_t group_at, count_at, async_at;  /* positions; -1: none */
  unsigned int op;
  int always_async, check_guard, set_guard;
  int track;  /* hook.track when wrapped: async calls complete at Work.wait (WorkMethod) */
} Collective;
ASSERT_WRAPPER_HEAD(Collective, fn);

static PyObject* s_group;    /* "group" */
static PyObject* s_async_op; /* "async_op" */
static PyObject* s_numel;    /* "numel" */
static PyObject* s_track;    /* "track" */

/* The argument at position `at`, or else the keyword `name`; NULL: not passed (borrowed). */
static PyObject* argument(PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames,
                          Py_ssize_t at, PyObject* name) {
  if (at >= 0 && at < nargs) return args[at];
  if (kwnames == NULL || name == NULL) return NULL;
  Py_ssize_t n = TUPLE_SIZE(kwnames);
  for (Py_ssize_t i = 0; i < n; ++i) {  /* keywords at call sites are interned */
    if (TUPLE_ITEM(kwnames, i) == name) return args[nargs + i];
  }
  for (Py_ssize_t i = 0; i < n; ++i) {
    if (PyUnicode_Compare(TUPLE_ITEM(kwnames, i), name) == 0) return args[nargs + i];
  }
  return NULL;
}

/* x.numel(), or the sum over a list or tuple of tensors; 0 for None; -1 with an error set. */
static long long elements(PyObject* x) {
  if (x == NULL || x == Py_None) return 0;
  if (PyList_Check(x) || PyTuple_Check(x)) {
    long long sum = 0;
    Py_ssize_t size = PySequence_Size(x);
    for (Py_ssize_t i = 0; i < size; ++i) {
      PyObject* item = PySequence_GetItem(x, i);
      long long n = item != NULL ? elements(item) : -1;
      Py_XDECREF(item);
      if (n < 0) return -1;
      sum += n;
    }
    return sum;
  }
  PyObject* n = call_method(x, s_numel);
  if (n == NULL) return -1;
  long long v = PyLong_AsLongLong(n);
  Py_DECREF(n);
  return v < 0 ? -1 : v;
}

/* The slot of `group` in hook.slots, made by hook.slot_for on its first call (a new reference),
 * or NULL: not recorded. Leaves no error. */
static Slot* slot_lookup(Collective* c, PyObject* group) {
  PyObject* found = PyDict_GetItemWithError(c->slots, group);
  if (found != NULL) {
    if (Py_IS_TYPE(found, SlotType)) {
      Py_INCREF(found);
      return (Slot*)found;
    }
    return NULL;  /* False: a group this rank is not in, or past the 48th */
  }
  if (PyErr_Occurred()) {  /* an unhashable group: torch will say what is wrong */
    PyErr_Clear();
    return NULL;
  }
  PyObject* made = call_one(c->slot_for, group);
  if (made == NULL) {
    PyErr_Clear();
    return NULL;
  }
  if (Py_IS_TYPE(made, SlotType)) return (Slot*)made;
  Py_DECREF(made);
  return NULL;
}

/* slot_lookup, remembering the last group's slot. */
static Slot* slot_of(Collective* c, PyObject* group) {
  if (group == c->last_group) {
    Py_INCREF((PyObject*)c->last_slot);
    return c->last_slot;
  }
  Slot* s = slot_lookup(c, group);
  if (s != NULL) {
    Py_INCREF(group);
    Py_INCREF((PyObject*)s);
    set_ref(&c->last_group, group);
    set_ref((PyObject**)&c->last_slot, (PyObject*)s);
  }
  return s;
}

/* Issues the call in its slot: the same stores in the same order as the Python wrapper. */
static Slot* issue(Collective* c, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames,
                   uint64_t* seq, int64_t* issued_ns) {
  PyObject* group = argument(args, nargs, kwnames, c->group_at, s_group);
  Slot* s = slot_of(c, group != NULL ? group : Py_None);
  if (s == NULL) return NULL;
  long long count = 0;
  if (c->count_at >= 0) {
    count = elements(argument(args, nargs, kwnames, c->count_at, c->count_name));
    if (count < 0) {  /* not tensors: torch will raise its own error */
      PyErr_Clear();
      Py_DECREF(s);
      return NULL;
    }
  }
  *seq = s->seq + 1;
  s->seq = *seq;
  if (s->op != c->op) {
    s->op = c->op;
    store32(s->at + kOp, c->op);
  }
  if (s->count != (unsigned long long)count) {
    s->count = (unsigned long long)count;
    store64(s->at + kCount, (uint64_t)count);
  }
  if (s->op_calls != NULL && c->op >= 1 && c->op <= kCountedOps) {
    uint32_t* calls = &s->op_calls[c->op - 1];
    store32((unsigned char*)calls, __atomic_load_n(calls, __ATOMIC_RELAXED) + 1);
  }
  *issued_ns = now_ns();
  store64(s->at + kIssuedNs, (uint64_t)*issued_ns);
  store64(s->at + kIssued, *seq);
  return s;
}

/* An async call with a Work: left pending when Work.wait is patched (returns 1). */
static int tracked(Collective* c, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames,
                   PyObject* result, Slot* s, uint64_t seq) {
  if (result == Py_None || !c->track) return 0;
  if (!c->always_async) {
    PyObject* flag = argument(args, nargs, kwnames, c->async_at, s_async_op);
    if (flag == NULL) return 0;
    int truth = PyObject_IsTrue(flag);
    if (truth <= 0) {
      PyErr_Clear();
      return 0;
    }
  }
  pending_add(result, s, seq);
  return 1;
}

static PyObject* collective_call(Collective* c, PyObject* const* args, size_t nargsf,
                                 PyObject* kwnames) {
  if (c->check_guard && g_busy) return call_wrapped(c->fn, args, nargsf, kwnames);
  Py_ssize_t nargs = nargs_of(nargsf);
  uint64_t seq = 0;
  int64_t issued_ns = 0;
  Slot* s = g_record.buf != NULL ? issue(c, args, nargs, kwnames, &seq, &issued_ns) : NULL;
  PyObject* result;
  if (c->set_guard) {
    int was = g_busy;
    g_busy = 1;
    result = call_wrapped(c->fn, args, nargsf, kwnames);
    g_busy = was;
  } else {
    result = call_wrapped(c->fn, args, nargsf, kwnames);
  }
  if (s == NULL || result == NULL) {  /* a call that raised is never completed */
    Py_XDECREF((PyObject*)s);
    return result;
  }
  if ((c->always_async || c->async_at >= 0 || kwnames != NULL) &&
      tracked(c, args, nargs, kwnames, result, s, seq)) {
    Py_DECREF(s);
    return result;
  }
  if (seq > s->done) {
    complete(s, seq, issued_ns);
    if (seq == 1) {
      PyObject* r = PyObject_CallNoArgs(c->first);
      if (r == NULL) PyErr_Clear();
      Py_XDECREF(r);
    }
  }
  Py_DECREF(s);
  return result;
}

static PyObject* collective_new(PyTypeObject* type, PyObject* args, PyObject* kwargs) {
  static char* names[] = {"fn", "hook", "slot_for", "first", "op", "group_at", "count_at",
                          "count_name", "async_at", "always_async", "check_guard", "set_guard",
                          NULL};
  PyObject *fn, *hook, *slot_for, *first, *count_name;
  unsigned int op;
  Py_ssize_t group_at, count_at, async_at;
  int always_async, check_guard, set_guard;
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OOOOInnOnppp", names, &fn, &hook, &slot_for,
                                   &first, &op, &group_at, &count_at, &count_name, &async_at,
                                   &always_async, &check_guard, &set_guard)) {
    return NULL;
  }
  PyObject* slots = PyObject_GetAttrString(hook, "slots");
  if (slots == NULL) return NULL;
  int track = truthy_attr(hook, s_track);
  if (!PyDict_Check(slots) || track < 0) {
    Py_DECREF(slots);
    if (!PyErr_Occurred()) {
      PyErr_SetString(PyExc_TypeError, "Collective: hook.slots must be a dict");
    }
    return NULL;
  }
  Collective* c = (Collective*)PyType_GenericAlloc(type, 0);
  if (c == NULL) {
    Py_DECREF(slots);
    return NULL;
  }
  c->vectorcall = (vectorcallfunc)collective_call;
  c->fn = Py_NewRef(fn);
  c->slots = slots;
  c->slot_for = Py_NewRef(slot_for);
  c->first = Py_NewRef(first);
  if (count_name != Py_None) {
    c->count_name = Py_NewRef(count_name);
    PyUnicode_InternInPlace(&c->count_name);
  }
  c->op = op;
  c->group_at = group_at;
  c->count_at = count_at;
  c->async_at = async_at;
  c->always_async = always_async;
  c->check_guard = check_guard;
  c->set_guard = set_guard;
  c->track = track;
  return (PyObject*)c;
}

static int collective_traverse(Collective* c, visitproc visit, void* arg) {
  Py_VISIT(Py_TYPE((PyObject*)c));
  Py_VISIT(c->dict);
  Py_VISIT(c->fn);
  Py_VISIT(c->slots);
  Py_VISIT(c->slot_for);
  Py_VISIT(c->first);
  Py_VISIT(c->count_name);
  Py_VISIT(c->last_group);
  Py_VISIT(c->last_slot);
  return 0;
}

static int collective_clear(Collective* c) {
  Py_CLEAR(c->dict);
  Py_CLEAR(c->fn);
  Py_CLEAR(c->slots);
  Py_CLEAR(c->slot_for);
  Py_CLEAR(c->first);
  Py_CLEAR(c->count_name);
  Py_CLEAR(c->last_group);
  Py_CLEAR(c->last_slot);
  return 0;
}

static PyType_Slot collective_slots[] = {
    {Py_tp_doc, "A torch.distributed collective that records each call in its group's slot "
                "(ccrun_progress._wrap says what each argument is)."},
    {Py_tp_new, collective_new},
    {Py_tp_traverse, collective_traverse},
    {Py_tp_clear, collective_clear},
    WRAPPER_SLOTS,
    {0, NULL},
};
static PyType_Spec collective_spec = {"_ccrun_hook.Collective", sizeof(Collective), 0,
                                      WRAPPER_FLAGS, collective_slots};

/* ---- DdpForward: DistributedDataParallel.forward, one DDP step per training forward ---- */

typedef struct {
  PyObject_HEAD
  PyObject* dict;
  vectorcallfunc vectorcall;
  PyObject* forward;       /* DistributedDataParallel.forward */
  PyObject* grad_enabled;  /* torch.is_grad_enabled */
  PyObject* key;           /* the entry's key in the module's __dict__ */
  PyObject* make_entry;    /* ccrun_progress._ddp_slot(module, torch) -> entry */
  PyObject* torch;
  PyObject* first;         /* called when the first step is issued: mark("step") */
} DdpForward;
ASSERT_WRAPPER_HEAD(DdpForward, forward);

static PyObject* s_training;
static PyObject* s_require_sync;

/* bool(module.name): from the module's __dict__, where nn.Module keeps `training` and DDP
 * `require_backward_grad_sync` (a dict lookup, not getattr's walk of DDP's classes first),
 * else by getattr; -1 with an error set. */
static int truthy_in(PyObject* dict, PyObject* module, PyObject* name) {
  PyObject* v = PyDict_GetItemWithError(dict, name);
  if (v == Py_True) return 1;
  if (v == Py_False) return 0;
  if (v != NULL) return PyObject_IsTrue(v);
  return PyErr_Occurred() ? -1 : truthy_attr(module, name);
}

/* Whether this forward of `module` is a DDP step (a training forward, grad enabled, outside
 * no_sync()), and then its entry in the module's __dict__ (a new reference); NULL: not a
 * step, or not recorded. Leaves no error. */
static PyObject* ddp_entry(DdpForward* d, PyObject* module) {
  PyObject* dict = PyObject_GenericGetDict(module, NULL);
  if (dict == NULL) {
    PyErr_Clear();
    return NULL;
  }
  int step = truthy_in(dict, module, s_training) > 0 &&
             truthy_in(dict, module, s_require_sync) > 0;
  if (step) {
    PyObject* enabled = PyObject_CallNoArgs(d->grad_enabled);
    step = enabled == Py_True;
    Py_XDECREF(enabled);
  }
  PyObject* entry = step ? Py_XNewRef(PyDict_GetItemWithError(dict, d->key)) : NULL;
  Py_DECREF(dict);
  if (!step || PyErr_Occurred()) {  /* an error reading an attribute: not a step either */
    Py_XDECREF(entry);
    PyErr_Clear();
    return NULL;
  }
  if (entry != NULL && PyTuple_Check(entry) && TUPLE_SIZE(entry) == 3 &&
      PyLong_AsVoidPtr(TUPLE_ITEM(entry, 0)) == (void*)module) {
    return entry;
  }
  Py_XDECREF(entry);  /* the first step, or a copy of a module that had one */
  PyErr_Clear();
  entry = PyObject_CallFunctionObjArgs(d->make_entry, module, d->torch, NULL);
  if (entry == NULL || !PyTuple_Check(entry) || TUPLE_SIZE(entry) != 3) {
    Py_XDECREF(entry);
    PyErr_Clear();
    return NULL;
  }
  return entry;
}

/* Issues one DDP step of `module` if this forward is one; never leaves an error. */
static void ddp_issue(DdpForward* d, PyObject* module) {
  PyObject* entry = ddp_entry(d, module);
  if (entry == NULL) return;
  Py_ssize_t i_issued_ns = PyLong_AsSsize_t(TUPLE_ITEM(entry, 1));
  Py_ssize_t i_issued = PyLong_AsSsize_t(TUPLE_ITEM(entry, 2));
  Py_DECREF(entry);
  if (PyErr_Occurred() || i_issued <= 0 || i_issued_ns <= 0 ||
      (size_t)i_issued >= kRecordBytes / 8 || (size_t)i_issued_ns >= kRecordBytes / 8) {
    PyErr_Clear();
    return;  /* not recorded: past the 48th slot */
  }
  uint64_t* u64 = (uint64_t*)g_record.buf;
  uint64_t seq = __atomic_load_n(&u64[i_issued], __ATOMIC_RELAXED) + 1;
  store64((unsigned char*)&u64[i_issued_ns], (uint64_t)now_ns());
  store64((unsigned char*)&u64[i_issued], seq);
  if (seq == 1) {
    PyObject* r = PyObject_CallNoArgs(d->first);
    if (r == NULL) PyErr_Clear();
    Py_XDECREF(r);
  }
}

static PyObject* ddp_call(DdpForward* d, PyObject* const* args, size_t nargsf,
                          PyObject* kwnames) {
  if (nargs_of(nargsf) >= 1 && g_record.buf != NULL) ddp_issue(d, args[0]);
  return call_wrapped(d->forward, args, nargsf, kwnames);
}

static PyObject* ddp_new(PyTypeObject* type, PyObject* args, PyObject* kwargs) {
  static char* names[] = {"forward", "grad_enabled", "key", "make_entry", "torch", "first",
                          NULL};
  PyObject *forward, *grad_enabled, *key, *make_entry, *torch, *first;
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OOUOOO", names, &forward, &grad_enabled,
                                   &key, &make_entry, &torch, &first)) {
    return NULL;
  }
  DdpForward* d = (DdpForward*)PyType_GenericAlloc(type, 0);
  if (d == NULL) return NULL;
  d->vectorcall = (vectorcallfunc)ddp_call;
  d->forward = Py_NewRef(forward);
  d->grad_enabled = Py_NewRef(grad_enabled);
  d->key = Py_NewRef(key);
  d->make_entry = Py_NewRef(make_entry);
  d->torch = Py_NewRef(torch);
  d->first = Py_NewRef(first);
  return (PyObject*)d;
}

static int ddp_traverse(DdpForward* d, visitproc visit, void* arg) {
  Py_VISIT(Py_TYPE((PyObject*)d));
  Py_VISIT(d->dict);
  Py_VISIT(d->forward);
  Py_VISIT(d->grad_enabled);
  Py_VISIT(d->key);
  Py_VISIT(d->make_entry);
  Py_VISIT(d->torch);
  Py_VISIT(d->first);
  return 0;
}

static int ddp_clear(DdpForward* d) {
  Py_CLEAR(d->dict);
  Py_CLEAR(d->forward);
  Py_CLEAR(d->grad_enabled);
  Py_CLEAR(d->key);
  Py_CLEAR(d->make_entry);
  Py_CLEAR(d->torch);
  Py_CLEAR(d->first);
  return 0;
}

/* A class attribute: DDP_instance.forward is a bound method, as with a Python function. */
#ifdef Py_LIMITED_API
static PyObject* g_method_type;  /* types.MethodType */
#endif
static PyObject* method_get(PyObject* self, PyObject* obj, PyObject* type) {
  (void)type;
  if (obj == NULL || obj == Py_None) return Py_NewRef(self);
#ifdef Py_LIMITED_API
  return PyObject_CallFunctionObjArgs(g_method_type, self, obj, NULL);
#else
  return PyMethod_New(self, obj);
#endif
}

static PyType_Slot ddp_slots[] = {
    {Py_tp_doc, "DistributedDataParallel.forward, issuing one DDP step in the module's slot "
                "per training forward (ccrun_progress._patch_ddp)."},
    {Py_tp_new, ddp_new},
    {Py_tp_descr_get, method_get},
    {Py_tp_traverse, ddp_traverse},
    {Py_tp_clear, ddp_clear},
    WRAPPER_SLOTS,
    {0, NULL},
};
static PyType_Spec ddp_spec = {"_ccrun_hook.DdpForward", sizeof(DdpForward), 0,
                               WRAPPER_FLAGS | Py_TPFLAGS_METHOD_DESCRIPTOR, ddp_slots};

/* ---- BackwardWatch: completes a DDP step when its backward has ended ---- */

/* The hook on a DDP module's watched gradient accumulator (ccrun_progress._watch_backward):
 * when the step's gradient is in, it queues an autograd final callback (a Completion) that
 * queues itself once more, to run after DDP's reducer's own end-of-backward callback; then it
 * writes the step's completion, and adds the time from the one to the other, the reducer's
 * wait for the step's last gradient all-reduces, to the slot's wait_us. Indices are the
 * record's u64 fields of the DDP slot (wait_us: its u32 index). */
typedef struct {
  PyObject_HEAD
  PyObject* queue_callback;  /* torch's autograd engine's queue_callback */
  Py_ssize_t i_issued, i_completed_ns, i_completed, i_wait_us;
  int armed;  /* 0 once disarm()ed: its module is gone and the slot may be another's */
} BackwardWatch;

typedef struct {
  PyObject_HEAD
  BackwardWatch* watch;
  uint64_t seq;
  int64_t began_ns;  /* the watched gradient was in */
  int queued_again;
} Completion;

static PyTypeObject* CompletionType;

static uint64_t* record_u64(void) { return (uint64_t*)g_record.buf; }

static PyObject* completion_call(Completion* c, PyObject* args, PyObject* kwargs) {
  (void)args;
  (void)kwargs;
  if (!c->queued_again) {  /* the reducer's callback was queued before this one: go after it */
    c->queued_again = 1;
    PyObject* r = call_one(c->watch->queue_callback, (PyObject*)c);
    if (r == NULL) PyErr_Clear();
    Py_XDECREF(r);
    Py_RETURN_NONE;
  }
  uint64_t* u64 = record_u64();
  if (c->watch->armed &&
      c->seq > __atomic_load_n(&u64[c->watch->i_completed], __ATOMIC_RELAXED)) {
    int64_t now = now_ns();
    uint32_t* wait_us = (uint32_t*)g_record.buf + c->watch->i_wait_us;
    if (now > c->began_ns) {
      store32((unsigned char*)wait_us, __atomic_load_n(wait_us, __ATOMIC_RELAXED) +
                                           (uint32_t)((now - c->began_ns) / 1000));
    }
    store64((unsigned char*)&u64[c->watch->i_completed_ns], (uint64_t)now);
    store64((unsigned char*)&u64[c->watch->i_completed], c->seq);
  }
  Py_RETURN_NONE;
}

static void completion_dealloc(Completion* c) {
  Py_XDECREF((PyObject*)c->watch);
  plain_dealloc((PyObject*)c);
}

static PyType_Slot completion_slots[] = {
    {Py_tp_doc, "A DDP step's completion, queued as autograd final callbacks (BackwardWatch)."},
    {Py_tp_call, completion_call},
    {Py_tp_dealloc, completion_dealloc},
    {0, NULL},
};
static PyType_Spec completion_spec = {"_ccrun_hook.Completion", sizeof(Completion), 0,
                                      Py_TPFLAGS_DEFAULT, completion_slots};

static PyObject* watch_call(BackwardWatch* w, PyObject* args, PyObject* kwargs) {
  (void)args;
  (void)kwargs;
  if (!w->armed) Py_RETURN_NONE;
  uint64_t* u64 = record_u64();
  uint64_t seq = __atomic_load_n(&u64[w->i_issued], __ATOMIC_RELAXED);
  if (seq <= __atomic_load_n(&u64[w->i_completed], __ATOMIC_RELAXED)) Py_RETURN_NONE;
  Completion* c = PyObject_New(Completion, CompletionType);
  if (c == NULL) {
    PyErr_Clear();
    Py_RETURN_NONE;
  }
  c->watch = (BackwardWatch*)Py_NewRef((PyObject*)w);
  c->seq = seq;
  c->began_ns = now_ns();
  c->queued_again = 0;
  PyObject* r = call_one(w->queue_callback, (PyObject*)c);
  if (r == NULL) PyErr_Clear();  /* outside a backward: nothing to complete */
  Py_XDECREF(r);
  Py_DECREF(c);
  Py_RETURN_NONE;
}

static PyObject* watch_new(PyTypeObject* type, PyObject* args, PyObject* kwargs) {
  static char* names[] = {"queue_callback", "i_issued", "i_completed_ns", "i_completed",
                          "i_wait_us", NULL};
  PyObject* queue_callback;
  Py_ssize_t i[4];
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "Onnnn", names, &queue_callback, &i[0], &i[1],
                                   &i[2], &i[3])) {
    return NULL;
  }
  for (int k = 0; k < 4; ++k) {
    Py_ssize_t fields = k == 3 ? kRecordBytes / 4 : kRecordBytes / 8;
    if (g_record.buf == NULL || i[k] <= 0 || i[k] >= fields) {
      PyErr_SetString(PyExc_ValueError, "BackwardWatch: no record attached, or bad index");
      return NULL;
    }
  }
  BackwardWatch* w = (BackwardWatch*)PyType_GenericAlloc(type, 0);
  if (w == NULL) return NULL;
  w->queue_callback = Py_NewRef(queue_callback);
  w->i_issued = i[0];
  w->i_completed_ns = i[1];
  w->i_completed = i[2];
  w->i_wait_us = i[3];
  w->armed = 1;
  return (PyObject*)w;
}

static PyObject* watch_disarm(BackwardWatch* w, PyObject* unused) {
  (void)unused;
  w->armed = 0;
  Py_RETURN_NONE;
}

static PyMethodDef watch_methods[] = {
    {"disarm", (PyCFunction)watch_disarm, METH_NOARGS,
     "disarm(): write nothing more (its module is gone: the node it hooks may outlive it, and "
     "its slot may be another module's)."},
    {NULL, NULL, 0, NULL},
};

static void watch_dealloc(BackwardWatch* w) {
  Py_XDECREF(w->queue_callback);
  plain_dealloc((PyObject*)w);
}

static PyType_Slot watch_slots[] = {
    {Py_tp_doc, "BackwardWatch(queue_callback, i_issued, i_completed_ns, i_completed, i_wait_us): "
                "the hook on a DDP module's watched gradient accumulator "
                "(ccrun_progress._watch_backward)."},
    {Py_tp_new, watch_new},
    {Py_tp_call, watch_call},
    {Py_tp_methods, watch_methods},
    {Py_tp_dealloc, watch_dealloc},
    {0, NULL},
};
static PyType_Spec watch_spec = {"_ccrun_hook.BackwardWatch", sizeof(BackwardWatch), 0,
                                 Py_TPFLAGS_DEFAULT, watch_slots};

/* ---- WorkMethod: Work.wait and Work.is_completed, completing a pending async call ---- */

typedef struct {
  PyObject_HEAD
  PyObject* dict;
  vectorcallfunc vectorcall;
  PyObject* method;   /* torch's own Work.wait or Work.is_completed */
  PyObject* first;    /* mark("collective") */
  int only_if_true;   /* is_completed: the call completed only when it says True */
} WorkMethod;
ASSERT_WRAPPER_HEAD(WorkMethod, method);

static PyObject* work_call(WorkMethod* w, PyObject* const* args, size_t nargsf,
                           PyObject* kwnames) {
  PyObject* result = call_wrapped(w->method, args, nargsf, kwnames);
  if (result == NULL || nargs_of(nargsf) < 1 || g_pending_count == 0) return result;
  if (w->only_if_true && result != Py_True) return result;
  Pending* found = pending_find(args[0]);
  if (found == NULL) return result;
  Pending call = pending_take(found);
  if (call.seq > call.slot->done) {
    /* issued_ns: this call's, unless calls of the group overlap */
    int64_t issued_ns = (int64_t)__atomic_load_n((uint64_t*)(call.slot->at + kIssuedNs),
                                                 __ATOMIC_RELAXED);
    complete(call.slot, call.seq, issued_ns);
    if (call.seq == 1) {
      PyObject* r = PyObject_CallNoArgs(w->first);
      if (r == NULL) PyErr_Clear();
      Py_XDECREF(r);
    }
  }
  pending_release(call);
  return result;
}

static PyObject* work_new(PyTypeObject* type, PyObject* args, PyObject* kwargs) {
  static char* names[] = {"method", "first", "only_if_true", NULL};
  PyObject *method, *first;
  int only_if_true;
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OOp", names, &method, &first,
                                   &only_if_true)) {
    return NULL;
  }
  WorkMethod* w = (WorkMethod*)PyType_GenericAlloc(type, 0);
  if (w == NULL) return NULL;
  w->vectorcall = (vectorcallfunc)work_call;
  w->method = Py_NewRef(method);
  w->first = Py_NewRef(first);
  w->only_if_true = only_if_true;
  return (PyObject*)w;
}

static int work_traverse(WorkMethod* w, visitproc visit, void* arg) {
  Py_VISIT(Py_TYPE((PyObject*)w));
  Py_VISIT(w->dict);
  Py_VISIT(w->method);
  Py_VISIT(w->first);
  return 0;
}

static int work_clear(WorkMethod* w) {
  Py_CLEAR(w->dict);
  Py_CLEAR(w->method);
  Py_CLEAR(w->first);
  return 0;
}

static PyType_Slot work_slots[] = {
    {Py_tp_doc, "torch's Work.wait or Work.is_completed, completing the async call the Work "
                "belongs to (ccrun_progress._patch_work)."},
    {Py_tp_new, work_new},
    {Py_tp_descr_get, method_get},
    {Py_tp_traverse, work_traverse},
    {Py_tp_clear, work_clear},
    WRAPPER_SLOTS,
    {0, NULL},
};
static PyType_Spec work_spec = {"_ccrun_hook.WorkMethod", sizeof(WorkMethod), 0,
                                WRAPPER_FLAGS | Py_TPFLAGS_METHOD_DESCRIPTOR, work_slots};

/* ---- the module ---- */

static PyObject* attach(PyObject* module, PyObject* view) {
  (void)module;
  if (g_record.buf != NULL) Py_RETURN_NONE;  /* once a process: the record never moves */
  Py_buffer b;
  if (PyObject_GetBuffer(view, &b, PyBUF_WRITABLE | PyBUF_SIMPLE) < 0) return NULL;
  if (b.len < kRecordBytes || ((uintptr_t)b.buf & 7) != 0) {
    PyBuffer_Release(&b);
    PyErr_SetString(PyExc_ValueError, "attach: not a mapped progress record");
    return NULL;
  }
  g_record = b;  /* kept, with the export that pins the mapping, for the process's life */
  Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"attach", attach, METH_O,
     "attach(record): the writable buffer of the mapped progress record the wrappers write."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "_ccrun_hook",
    "The start-up hook's per-call wrappers in C (ccrun_progress.py uses them when it can).",
    -1, methods, NULL, NULL, NULL, NULL,
};

static int intern(PyObject** s, const char* text) {
  *s = PyUnicode_InternFromString(text);
  return *s != NULL ? 0 : -1;
}

PyMODINIT_FUNC PyInit__ccrun_hook(void) {
  if (intern(&s_group, "group") || intern(&s_async_op, "async_op") ||
      intern(&s_numel, "numel") || intern(&s_track, "track") ||
      intern(&s_training, "training") || intern(&s_require_sync, "require_backward_grad_sync")) {
    return NULL;
  }
#ifdef Py_LIMITED_API
  if (Py_Version < 0x030B0000) {  /* an older Python loads abi3 modules too */
    PyErr_SetString(PyExc_ImportError, "_ccrun_hook.abi3 needs Python 3.11 or later");
    return NULL;
  }
  PyObject* types = PyImport_ImportModule("types");
  g_method_type = types != NULL ? PyObject_GetAttrString(types, "MethodType") : NULL;
  Py_XDECREF(types);
  if (g_method_type == NULL) return NULL;
#endif
  PyObject* m = PyModule_Create(&module_def);
  if (m == NULL) return NULL;
  struct {
    const char* name;
    PyType_Spec* spec;
    PyTypeObject** type;
  } made[] = {{"Slot", &slot_spec, &SlotType},
              {"Collective", &collective_spec, NULL},
              {"DdpForward", &ddp_spec, NULL},
              {"WorkMethod", &work_spec, NULL},
              {"BackwardWatch", &watch_spec, NULL},
              {NULL, &completion_spec, &CompletionType}};
  for (size_t i = 0; i < sizeof made / sizeof made[0]; ++i) {
    PyObject* type = PyType_FromSpec(made[i].spec);
    int failed = type == NULL ||
                 (made[i].name != NULL && PyModule_AddObjectRef(m, made[i].name, type) < 0);
    if (!failed && made[i].type != NULL) {
      *made[i].type = (PyTypeObject*)Py_NewRef(type);  /* for the module's life */
    }
    Py_XDECREF(type);
    if (failed) {
      Py_DECREF(m);
      return NULL;
    }
  }
  return m;
}
