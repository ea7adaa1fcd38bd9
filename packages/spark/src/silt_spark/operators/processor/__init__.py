"""silt_spark.operators.processor"""
