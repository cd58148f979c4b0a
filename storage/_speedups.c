/* storage._speedups: the inner loop of storage.format.parse, compiled.

   Loading a group log spends most of its time in that loop: one struct unpack, a few checks, two slices and a
   tuple per entry, a million times over for a log of a million offsets. This module does the same steps in C
   for every complete entry of a buffer and hands back the entries as a list, together with where and why it
   stopped; storage.format.parse keeps everything else (reading chunks, progress, what a stop means) and keeps
   its pure-Python loop for when this module is not built (no compiler at install: it is optional). The two
   loops must agree entry for entry and byte for byte: tests/unit/storage run every test against both.

   scan(buf, pos, last, verify, emit, entry_cls) -> (entries, pos, last, count, stop, length)
     buf        bytes holding entries from offset pos on
     last       the sequence number the next entry must exceed (-1: none yet)
     verify     check each entry's CRC32C
     emit       build the entries (else only check them: entries is None)
     entry_cls  the tuple subclass to build (storage.format.Entry): (seq, key, value or None, timestamp_ms)
   Returns at the first entry that is not complete in buf (stop 0), or that fails a check: stop 1 for a bad
   header (as parse's BAD_HEADER), 2 for a checksum mismatch, 3 for an intact entry of a newer format version
   (only with verify). pos is then that entry's offset; length its length field, when it was read. */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define FORMAT_VERSION 1
#define FRAME_SIZE 30
#define HEADER_SIZE 22

enum { STOP_INCOMPLETE = 0, STOP_BAD_HEADER = 1, STOP_CHECKSUM = 2, STOP_NEWER_FORMAT = 3 };

/* -- CRC32C (Castagnoli), as the crc32c package computes it ---------------------------------------------- */

static uint32_t crc_table[256];

static void crc_init(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
        crc_table[i] = c;
    }
}

static uint32_t crc_soft(uint32_t crc, const unsigned char *p, size_t n) {
    while (n--) crc = crc_table[(crc ^ *p++) & 0xFF] ^ (crc >> 8);
    return crc;
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define HAVE_CRC_HW 1
static int crc_hw_ok;

__attribute__((target("sse4.2"))) static uint32_t crc_hw(uint32_t crc, const unsigned char *p, size_t n) {
    uint64_t c = crc;
    while (n >= 8) {
        uint64_t v;
        memcpy(&v, p, 8);
        c = __builtin_ia32_crc32di(c, v);
        p += 8;
        n -= 8;
    }
    uint32_t c32 = (uint32_t)c;
    while (n--) c32 = __builtin_ia32_crc32qi(c32, *p++);
    return c32;
}
#endif

static uint32_t crc32c(const unsigned char *p, size_t n) {
#ifdef HAVE_CRC_HW
    if (crc_hw_ok) return crc_hw(0xFFFFFFFFu, p, n) ^ 0xFFFFFFFFu;
#endif
    return crc_soft(0xFFFFFFFFu, p, n) ^ 0xFFFFFFFFu;
}

/* -- little-endian reads --------------------------------------------------------------------------------- */

static inline uint32_t le32(const unsigned char *p) {
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}

static inline uint64_t le64(const unsigned char *p) { return (uint64_t)le32(p) | ((uint64_t)le32(p + 4) << 32); }

/* -- scan ------------------------------------------------------------------------------------------------- */

static PyObject *new_entry(PyTypeObject *cls, uint64_t seq, const unsigned char *key, Py_ssize_t klen,
                           const unsigned char *value, Py_ssize_t vlen, int tombstone, int64_t ts) {
    /* What tuple.__new__(cls, items) does for a tuple subclass: allocate it with its items, then fill them. */
    PyObject *entry = cls->tp_alloc(cls, 4);
    if (entry == NULL) return NULL;
    PyObject *s = PyLong_FromUnsignedLongLong(seq);
    PyObject *k = s ? PyBytes_FromStringAndSize((const char *)key, klen) : NULL;
    PyObject *v = NULL;
    if (k != NULL) {
        if (tombstone) {
            v = Py_None;
            Py_INCREF(v);
        } else {
            v = PyBytes_FromStringAndSize((const char *)value, vlen);
        }
    }
    PyObject *t = v ? PyLong_FromLongLong(ts) : NULL;
    if (t == NULL) {
        Py_XDECREF(s);
        Py_XDECREF(k);
        Py_XDECREF(v);
        Py_DECREF(entry);
        return NULL;
    }
    PyTuple_SET_ITEM(entry, 0, s);
    PyTuple_SET_ITEM(entry, 1, k);
    PyTuple_SET_ITEM(entry, 2, v);
    PyTuple_SET_ITEM(entry, 3, t);
    return entry;
}

static PyObject *scan(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 6) {
        PyErr_SetString(PyExc_TypeError, "scan(buf, pos, last, verify, emit, entry_cls) takes 6 arguments");
        return NULL;
    }
    PyObject *bufobj = args[0];
    if (!PyBytes_Check(bufobj)) {
        PyErr_SetString(PyExc_TypeError, "scan: buf must be bytes");
        return NULL;
    }
    if (!PyType_Check(args[5]) || !PyType_IsSubtype((PyTypeObject *)args[5], &PyTuple_Type)) {
        PyErr_SetString(PyExc_TypeError, "scan: entry_cls must be a tuple subclass");
        return NULL;
    }
    PyTypeObject *cls = (PyTypeObject *)args[5];
    Py_ssize_t pos = PyLong_AsSsize_t(args[1]);
    if (pos == -1 && PyErr_Occurred()) return NULL;
    /* last: -1 (nothing read yet) or a sequence number (unsigned 64-bit on disk) */
    int has_last;
    uint64_t last = 0;
    int overflow = 0;
    long long signed_last = PyLong_AsLongLongAndOverflow(args[2], &overflow);
    if (signed_last == -1 && PyErr_Occurred()) return NULL;
    if (overflow > 0) { /* above 2**63 - 1 */
        last = PyLong_AsUnsignedLongLong(args[2]);
        if (last == (uint64_t)-1 && PyErr_Occurred()) return NULL;
        has_last = 1;
    } else if (overflow < 0 || signed_last < 0) {
        has_last = 0;
    } else {
        last = (uint64_t)signed_last;
        has_last = 1;
    }
    int verify = PyObject_IsTrue(args[3]);
    int emit = PyObject_IsTrue(args[4]);
    if (verify < 0 || emit < 0) return NULL;

    const unsigned char *buf = (const unsigned char *)PyBytes_AS_STRING(bufobj);
    Py_ssize_t n = PyBytes_GET_SIZE(bufobj);
    if (pos < 0 || pos > n) {
        PyErr_SetString(PyExc_ValueError, "scan: pos out of range");
        return NULL;
    }
    PyObject *entries = NULL;
    if (emit) {
        entries = PyList_New(0);
        if (entries == NULL) return NULL;
    }
    int stop = STOP_INCOMPLETE;
    long long length = -1;
    Py_ssize_t count = 0;
    while (pos + FRAME_SIZE <= n) {
        const unsigned char *p = buf + pos;
        uint32_t len32 = le32(p);
        uint32_t crc = le32(p + 4);
        unsigned ver = p[8], flags = p[9];
        uint32_t klen = le32(p + 10);
        uint64_t seq = le64(p + 14);
        int64_t ts = (int64_t)le64(p + 22);
        length = len32;
        if (len32 < HEADER_SIZE) {
            stop = STOP_BAD_HEADER;
            break;
        }
        Py_ssize_t end = pos + 8 + (Py_ssize_t)len32;
        if (end > n) break;
        if (verify && crc32c(p + 8, len32) != crc) {
            stop = STOP_CHECKSUM;
            break;
        }
        if (ver != FORMAT_VERSION || flags > 1 || klen > len32 - HEADER_SIZE || (has_last && seq <= last) ||
            (flags && klen != len32 - HEADER_SIZE)) {
            stop = (ver > FORMAT_VERSION && verify) ? STOP_NEWER_FORMAT : STOP_BAD_HEADER;
            break;
        }
        if (emit) {
            const unsigned char *key = p + FRAME_SIZE;
            PyObject *entry = new_entry(cls, seq, key, (Py_ssize_t)klen, key + klen,
                                        (Py_ssize_t)(len32 - HEADER_SIZE - klen), flags & 1, ts);
            if (entry == NULL || PyList_Append(entries, entry) < 0) {
                Py_XDECREF(entry);
                Py_DECREF(entries);
                return NULL;
            }
            Py_DECREF(entry);
        }
        last = seq;
        has_last = 1;
        count++;
        pos = end;
    }
    PyObject *last_obj = has_last ? PyLong_FromUnsignedLongLong(last) : PyLong_FromLong(-1);
    if (last_obj == NULL) {
        Py_XDECREF(entries);
        return NULL;
    }
    if (entries == NULL) {
        entries = Py_None;
        Py_INCREF(entries);
    }
    return Py_BuildValue("(NnNniL)", entries, pos, last_obj, count, stop, length);
}

static PyObject *checksum(PyObject *module, PyObject *arg) {
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0) return NULL;
    uint32_t c = crc32c((const unsigned char *)view.buf, (size_t)view.len);
    PyBuffer_Release(&view);
    return PyLong_FromUnsignedLong(c);
}

static PyMethodDef methods[] = {
    {"scan", (PyCFunction)(void (*)(void))scan, METH_FASTCALL,
     "scan(buf, pos, last, verify, emit, entry_cls) -> (entries, pos, last, count, stop, length)"},
    {"checksum", checksum, METH_O, "checksum(data) -> CRC32C of data (what the crc32c package computes)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "storage._speedups", "The inner loop of storage.format.parse, compiled.", -1, methods,
};

PyMODINIT_FUNC PyInit__speedups(void) {
    crc_init();
#ifdef HAVE_CRC_HW
    __builtin_cpu_init();
    crc_hw_ok = __builtin_cpu_supports("sse4.2");
#endif
    return PyModule_Create(&module_def);
}
