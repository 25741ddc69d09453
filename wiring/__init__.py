"""The wiring: what the HTTP service and the ``qkv`` command line both need, in one place.

The collections (:mod:`wiring.collections`): searches, attend, generate, and writes and
deletes with all their side effects; the encoder registry (:mod:`wiring.encoders`), the
calibration and adapt job runners (:mod:`wiring.calibrator`, :mod:`wiring.adapter`) and the domain's
errors (:mod:`wiring.errors`). Loading the encoder, the store and the decoders
(:mod:`wiring.components`), seeding the demo collections (:mod:`wiring.demo`), translation
memories and decoder evaluation (:mod:`wiring.translation_memory`,
:mod:`wiring.translation`), the bulk indexing job with the encoder
(:mod:`wiring.indexing`), encoder evaluation with the store (:mod:`wiring.evaluation`), and
the process settings torch needs before it loads (:mod:`wiring.runtime`). It imports
``encoder``, ``index`` and ``decoder``; neither ``api`` nor ``cli`` (they import it).

Nothing is imported here at package level: ``wiring.runtime.configure()`` must run before
torch loads.
"""
