"""The benchmark users run: every configured case (default: the embedded tiny models).

    pytest benchmarks/ --s2st-config my.yaml
"""


def test_inference(s2st_pipeline, s2st_dataset, s2st_benchmark):
    s2st_benchmark(s2st_pipeline, s2st_dataset)
