"""Images: the builder image and ``docker run`` of a stage (``container``), what the bundle may build
images from (``pins``), and runtime image jobs (``image_job``, ``runtime_image``, ``upstream_lock``).
Stands on ``wheels/`` and the ground.
"""
