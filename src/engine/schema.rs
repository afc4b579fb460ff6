//! TEMPORARY stand-in until the schema module lands (replaced at merge).
use serde_json::Value;
pub fn check_schema(schema: &Value) -> Result<(), String> {
    if schema.is_object() {
        Ok(())
    } else {
        Err("not an object".into())
    }
}
pub fn validate(schema: &Value, value: &Value) -> Result<(), String> {
    let validator = jsonschema::validator_for(schema).map_err(|e| e.to_string())?;
    validator.validate(value).map_err(|e| e.to_string())
}
pub fn fabricate(_schema: &Value) -> Value {
    Value::Null
}
pub fn extract_json(text: &str) -> Option<Value> {
    serde_json::from_str(text.trim()).ok()
}
pub fn output_instructions(schema: &Value) -> String {
    format!("Answer with JSON matching {schema}")
}
pub fn repair_instructions(error: &str, schema: &Value) -> String {
    format!("{error}; answer with JSON matching {schema}")
}
