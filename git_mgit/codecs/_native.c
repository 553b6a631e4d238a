/* Byte-plane kernels: one pass over a chunk, the GIL released.

   split(src, dst, width, sign_at, op, base)
       dst[p * n + i] = byte (width - 1 - p) of word i, where word i is the
       element src[i] transformed by op (0 none, 1 xor base[i], 2 zigzag of
       src[i] - base[i] with wrapping integer arithmetic), then, if sign_at
       >= 0, with its top (sign) bit moved down to bit sign_at: the bits
       above sign_at shift up one place, the bits below stay. sign_at 0 is a
       rotation left by one bit (the layout of objects written before
       version 2); sign_at just below a float's exponent keeps the exponent
       in the top plane and the sign in the plane under it, so that a reader
       of the top planes learns the sign. n = len(src) / width.
   join(dst, planes, width, sign_at, op, base)
       the inverse: word i is assembled from planes[p][i], its sign bit moved
       back to the top if sign_at >= 0, then op undone against base[i];
       written to dst.

   Elements are little-endian words of 1, 2, 4 or 8 bytes. The numpy code in
   numpy_planes.py computes exactly the same bytes (tests hold the two
   together); this module only makes it one memory pass instead of several. */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

enum { OP_NONE = 0, OP_XOR = 1, OP_SUB = 2 };

#define KERNELS(W, T)                                                                    \
    static void split_##W(const uint8_t *src, uint8_t *dst, Py_ssize_t n, int sign_at,   \
                          int op, const uint8_t *base)                                   \
    {                                                                                    \
        const int move = sign_at >= 0, at = move ? sign_at : 0;                          \
        const T low = (T)(((T)1 << at) - 1), high = (T) ~(T)(low | ((T)1 << at));        \
        for (Py_ssize_t i = 0; i < n; i++) {                                             \
            T x, b;                                                                      \
            memcpy(&x, src + i * W, W);                                                  \
            if (op == OP_XOR) {                                                          \
                memcpy(&b, base + i * W, W);                                             \
                x ^= b;                                                                  \
            } else if (op == OP_SUB) {                                                   \
                memcpy(&b, base + i * W, W);                                             \
                T d = (T)(x - b);                                                        \
                x = (T)((T)(d << 1) ^ (T)(-(T)(d >> (8 * W - 1))));                      \
            }                                                                            \
            if (move)                                                                    \
                x = (T)(((T)(x << 1) & high) | (T)((T)(x >> (8 * W - 1)) << at) |        \
                        (T)(x & low));                                                   \
            for (int p = 0; p < W; p++)                                                  \
                dst[p * n + i] = (uint8_t)(x >> (8 * (W - 1 - p)));                      \
        }                                                                                \
    }                                                                                    \
    static void join_##W(uint8_t *dst, const uint8_t *const *planes, Py_ssize_t n,       \
                         int sign_at, int op, const uint8_t *base)                       \
    {                                                                                    \
        const int move = sign_at >= 0, at = move ? sign_at : 0;                          \
        const T low = (T)(((T)1 << at) - 1), high = (T) ~(T)(low | ((T)1 << at));        \
        for (Py_ssize_t i = 0; i < n; i++) {                                             \
            T x = 0, b;                                                                  \
            for (int p = 0; p < W; p++)                                                  \
                x |= (T)((T)planes[p][i] << (8 * (W - 1 - p)));                          \
            if (move)                                                                    \
                x = (T)((T)((T)((x >> at) & 1) << (8 * W - 1)) |                         \
                        (T)((T)(x & high) >> 1) | (T)(x & low));                         \
            if (op == OP_XOR) {                                                          \
                memcpy(&b, base + i * W, W);                                             \
                x ^= b;                                                                  \
            } else if (op == OP_SUB) {                                                   \
                memcpy(&b, base + i * W, W);                                             \
                x = (T)(((T)(x >> 1) ^ (T)(-(T)(x & 1))) + b);                           \
            }                                                                            \
            memcpy(dst + i * W, &x, W);                                                  \
        }                                                                                \
    }

KERNELS(1, uint8_t)
KERNELS(2, uint16_t)
KERNELS(4, uint32_t)
KERNELS(8, uint64_t)

static int check_args(int width, int sign_at, int op)
{
    if (width != 1 && width != 2 && width != 4 && width != 8) {
        PyErr_SetString(PyExc_ValueError, "width must be 1, 2, 4 or 8");
        return -1;
    }
    if (sign_at < -1 || sign_at >= 8 * width) {
        PyErr_SetString(PyExc_ValueError, "sign_at must be -1 (keep) or a bit of the element");
        return -1;
    }
    if (op < OP_NONE || op > OP_SUB) {
        PyErr_SetString(PyExc_ValueError, "op must be 0 (none), 1 (xor) or 2 (sub)");
        return -1;
    }
    return 0;
}

/* The base buffer when op needs one (it must hold `len` bytes), else none. */
static int get_base(PyObject *obj, int op, Py_ssize_t len, Py_buffer *view)
{
    view->buf = NULL;
    view->obj = NULL;
    if (op == OP_NONE)
        return 0;
    if (obj == Py_None) {
        PyErr_SetString(PyExc_ValueError, "a delta op needs a base");
        return -1;
    }
    if (PyObject_GetBuffer(obj, view, PyBUF_SIMPLE) < 0)
        return -1;
    if (view->len != len) {
        PyBuffer_Release(view);
        PyErr_SetString(PyExc_ValueError, "base and data differ in length");
        return -1;
    }
    return 0;
}

static PyObject *native_split(PyObject *self, PyObject *args)
{
    Py_buffer src, dst, base;
    int width, sign_at, op;
    PyObject *base_obj;
    if (!PyArg_ParseTuple(args, "y*w*iiiO", &src, &dst, &width, &sign_at, &op, &base_obj))
        return NULL;
    PyObject *result = NULL;
    if (check_args(width, sign_at, op) < 0)
        goto done;
    if (src.len % width || dst.len != src.len) {
        PyErr_SetString(PyExc_ValueError, "dst must be as long as src, a whole number of elements");
        goto done;
    }
    if (get_base(base_obj, op, src.len, &base) < 0)
        goto done;
    Py_ssize_t n = src.len / width;
    const uint8_t *s = src.buf, *b = base.buf;
    uint8_t *d = dst.buf;
    Py_BEGIN_ALLOW_THREADS
    switch (width) {
    case 1: split_1(s, d, n, sign_at, op, b); break;
    case 2: split_2(s, d, n, sign_at, op, b); break;
    case 4: split_4(s, d, n, sign_at, op, b); break;
    default: split_8(s, d, n, sign_at, op, b); break;
    }
    Py_END_ALLOW_THREADS
    if (base.obj)
        PyBuffer_Release(&base);
    result = Py_NewRef(Py_None);
done:
    PyBuffer_Release(&src);
    PyBuffer_Release(&dst);
    return result;
}

static PyObject *native_join(PyObject *self, PyObject *args)
{
    Py_buffer dst, base, views[8];
    int width, sign_at, op, held = 0;
    PyObject *planes_obj, *base_obj, *seq = NULL, *result = NULL;
    if (!PyArg_ParseTuple(args, "w*OiiiO", &dst, &planes_obj, &width, &sign_at, &op, &base_obj))
        return NULL;
    if (check_args(width, sign_at, op) < 0)
        goto done;
    if (dst.len % width) {
        PyErr_SetString(PyExc_ValueError, "dst is not a whole number of elements");
        goto done;
    }
    Py_ssize_t n = dst.len / width;
    seq = PySequence_Fast(planes_obj, "planes must be a sequence of buffers");
    if (seq == NULL)
        goto done;
    if (PySequence_Fast_GET_SIZE(seq) != width) {
        PyErr_SetString(PyExc_ValueError, "one plane per byte of the element is needed");
        goto done;
    }
    const uint8_t *rows[8];
    for (; held < width; held++) {
        if (PyObject_GetBuffer(PySequence_Fast_GET_ITEM(seq, held), &views[held], PyBUF_SIMPLE) < 0)
            goto done;
        if (views[held].len != n) {
            PyBuffer_Release(&views[held]);
            PyErr_SetString(PyExc_ValueError, "every plane must hold one byte per element");
            goto done;
        }
        rows[held] = views[held].buf;
    }
    if (get_base(base_obj, op, dst.len, &base) < 0)
        goto done;
    uint8_t *d = dst.buf;
    const uint8_t *b = base.buf;
    Py_BEGIN_ALLOW_THREADS
    switch (width) {
    case 1: join_1(d, rows, n, sign_at, op, b); break;
    case 2: join_2(d, rows, n, sign_at, op, b); break;
    case 4: join_4(d, rows, n, sign_at, op, b); break;
    default: join_8(d, rows, n, sign_at, op, b); break;
    }
    Py_END_ALLOW_THREADS
    if (base.obj)
        PyBuffer_Release(&base);
    result = Py_NewRef(Py_None);
done:
    while (held > 0)
        PyBuffer_Release(&views[--held]);
    Py_XDECREF(seq);
    PyBuffer_Release(&dst);
    return result;
}

static PyMethodDef methods[] = {
    {"split", native_split, METH_VARARGS,
     "split(src, dst, width, sign_at, op, base): elements to byte planes, most significant first"},
    {"join", native_join, METH_VARARGS,
     "join(dst, planes, width, sign_at, op, base): byte planes back to elements"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "_native",
    .m_doc = "Byte-plane kernels for git-mgit's codecs.",
    .m_size = -1,
    .m_methods = methods,
};

PyMODINIT_FUNC PyInit__native(void)
{
    return PyModule_Create(&module);
}
