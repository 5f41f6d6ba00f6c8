"""The compiled parts: the XPlane event decoder (scaldiag/readers/xplane/_wire.c),
the Kineto JSON scanner (scaldiag/readers/_kineto_scan.c) and the host threads'
sweeps (scaldiag/analyze/_hoststate.c).

Both optional: where they cannot be built (no C compiler), the install goes on
and scaldiag uses its numpy code, which gives the same results (the tests
compare the two; SCALDIAG_NATIVE=0 selects the numpy code); Kineto files are
then read with json.loads (readers/kineto/reference.py), slower and in more memory.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "scaldiag.readers.xplane._wire", ["scaldiag/readers/xplane/_wire.c"], optional=True
        ),
        Extension(
            "scaldiag.readers._kineto_scan",
            ["scaldiag/readers/_kineto_scan.c"],
            optional=True,
            extra_compile_args=["-O3"],
        ),
        Extension("scaldiag.analyze._hoststate", ["scaldiag/analyze/_hoststate.c"], optional=True),
    ]
)
