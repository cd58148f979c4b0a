/* coordinator._speedups: coordinator.records.simple_offset_commit, compiled.

   Loading a group log reads every record once, and nearly every record of a big log is an offset commit
   without metadata. simple_offset_commit picks such a record's fields out of its key and value bytes; this is
   the same function in C (coordinator.records uses it when it is built, its own otherwise; the install builds
   it where there is a C compiler). Both must answer alike for any bytes: tests/unit/coordinator/
   test_records.py compares them on records damaged at random.

   simple_offset_commit(key, value) -> (group, topic, partition, offset, leader_epoch, commit_timestamp_ms)
   or None: the value must be OffsetCommitValue v3 with empty metadata (24 bytes), the key an OffsetCommitKey
   (v0 or v1) whose group and topic are valid UTF-8. Like the Python version it remembers the last key's bytes
   up to the partition, with its group and topic: the next key of the same group and topic (a log holds runs
   of them) reuses those strings, so the loaded offsets share them instead of holding a copy each. */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

static inline uint16_t be16(const unsigned char *p) { return (uint16_t)((p[0] << 8) | p[1]); }

static inline uint32_t be32(const unsigned char *p) {
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | (uint32_t)p[3];
}

static inline uint64_t be64(const unsigned char *p) { return ((uint64_t)be32(p) << 32) | (uint64_t)be32(p + 4); }

/* The last key decoded: its bytes up to the partition, and its group and topic (NULL: none yet). The GIL is
   held throughout, so no other thread sees them half replaced. */
static PyObject *last_prefix = NULL;
static PyObject *last_group = NULL;
static PyObject *last_topic = NULL;

static PyObject *simple_offset_commit(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "simple_offset_commit(key, value) takes 2 arguments");
        return NULL;
    }
    PyObject *key = args[0], *value = args[1];
    if (!PyBytes_Check(key) || !PyBytes_Check(value)) {
        PyErr_SetString(PyExc_TypeError, "simple_offset_commit: key and value must be bytes");
        return NULL;
    }
    if (PyBytes_GET_SIZE(value) != 24) Py_RETURN_NONE;
    const unsigned char *v = (const unsigned char *)PyBytes_AS_STRING(value);
    int16_t version = (int16_t)be16(v);
    int64_t offset = (int64_t)be64(v + 2);
    int32_t leader_epoch = (int32_t)be32(v + 10);
    int16_t metadata_length = (int16_t)be16(v + 14);
    int64_t commit_timestamp_ms = (int64_t)be64(v + 16);
    if (version != 3 || metadata_length != 0) Py_RETURN_NONE;

    const unsigned char *k = (const unsigned char *)PyBytes_AS_STRING(key);
    Py_ssize_t n = PyBytes_GET_SIZE(key);
    Py_ssize_t end;
    if (last_prefix != NULL && n == PyBytes_GET_SIZE(last_prefix) + 4 &&
        memcmp(k, PyBytes_AS_STRING(last_prefix), (size_t)(n - 4)) == 0) {
        end = n - 4;
    } else {
        if (n < 10) Py_RETURN_NONE;
        int16_t key_version = (int16_t)be16(k);
        int16_t group_length = (int16_t)be16(k + 2);
        if (key_version < 0 || key_version > 1 || group_length < 0) Py_RETURN_NONE;
        Py_ssize_t group_end = 4 + (Py_ssize_t)group_length;
        if (group_end + 6 > n) Py_RETURN_NONE;
        end = group_end + 2 + (Py_ssize_t)(int16_t)be16(k + group_end);
        if (end < group_end + 2 || end + 4 != n) Py_RETURN_NONE;
        PyObject *group = PyUnicode_DecodeUTF8((const char *)k + 4, group_length, "strict");
        if (group == NULL) {
            if (!PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) return NULL;
            PyErr_Clear();
            Py_RETURN_NONE;
        }
        PyObject *topic = PyUnicode_DecodeUTF8((const char *)k + group_end + 2, end - group_end - 2, "strict");
        if (topic == NULL) {
            Py_DECREF(group);
            if (!PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) return NULL;
            PyErr_Clear();
            Py_RETURN_NONE;
        }
        PyObject *prefix = PyBytes_FromStringAndSize((const char *)k, end);
        if (prefix == NULL) {
            Py_DECREF(group);
            Py_DECREF(topic);
            return NULL;
        }
        Py_XSETREF(last_prefix, prefix);
        Py_XSETREF(last_group, group);
        Py_XSETREF(last_topic, topic);
    }
    int32_t partition = (int32_t)be32(k + end);
    return Py_BuildValue("(OOiLiL)", last_group, last_topic, (int)partition, (long long)offset, (int)leader_epoch,
                         (long long)commit_timestamp_ms);
}

static PyMethodDef methods[] = {
    {"simple_offset_commit", (PyCFunction)(void (*)(void))simple_offset_commit, METH_FASTCALL,
     "simple_offset_commit(key, value) -> (group, topic, partition, offset, leader_epoch, commit_timestamp_ms) "
     "or None (coordinator.records.simple_offset_commit)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "coordinator._speedups", "coordinator.records.simple_offset_commit, compiled.", -1,
    methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__speedups(void) { return PyModule_Create(&module_def); }
