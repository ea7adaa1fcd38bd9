"""silt_spark.operators.join"""
