"""silt_spark.inspect"""
