"""silt_spark.runtime"""
